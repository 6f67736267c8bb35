"""gpufleet.admission: the admission webhooks the scheduler serves: the mutating one for fractional GPU pods
(:mod:`~gpufleet.admission.webhook`), the validating one with gpufleet's lint rules
(:mod:`~gpufleet.admission.validating`, its settings :mod:`~gpufleet.admission.lint_settings`), and their server
(:mod:`~gpufleet.admission.webhook_server`)."""
