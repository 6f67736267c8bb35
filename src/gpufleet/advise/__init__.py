"""Proposals for MIG layouts, time-slicing and quotas, judged by the simulator (``gpufleet advise``).

:mod:`.contract` holds the proposal's dataclasses; :mod:`.inputs` reads a cluster and a demand; :mod:`.fleet`
and :mod:`.demand` describe the supply and the demand; :mod:`.fit` says which devices a class may be offered;
:mod:`.milp` proposes; :mod:`.realise`, :mod:`.queues` and :mod:`.nvidia` make a proposal concrete (NodePools or
Nodes, Kueue objects, NVIDIA's files); :mod:`.judge` scores it with the simulator; :mod:`.search` runs the whole;
:mod:`.reasons` says it in words; :mod:`.files` writes what a user applies.
"""
