"""Guard rails: lint rules over workloads, queues and the cluster they run on, written once and applied three ways.

``gpufleet lint`` runs them over manifest files (:mod:`.lintfiles`), the scheduler's validating admission webhook over
each object the API server sends (:mod:`gpufleet.admission.validating`), and ``gpufleet lint --export vap`` writes the
ones that need no knowledge of the cluster as ValidatingAdmissionPolicies (:mod:`.vap`). A rule is one small object
in :data:`.rules.RULES`; :mod:`.engine` applies them; :mod:`.render` prints findings as text, JSON or SARIF.
docs/lint.md lists every rule with its rationale.
"""
