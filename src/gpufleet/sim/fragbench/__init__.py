"""The fragmentation benchmark of FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23) on the openb trace,
run with gpufleet's own placement engine (``gpufleet bench fragmentation``; bench/README.md says how):

* :mod:`.trace`: the openb trace as the benchmark's nodes and pods;
* :mod:`.placer`: the placement engines under comparison;
* :mod:`.bench`: the fill-up experiment, its runs and their summaries;
* :mod:`.report` and :mod:`.plot`: the fragmentation curve and the table, as text and as a figure.
"""
