"""The live scheduler's configuration file (``--config``): read, validated, every problem reported at once.

Errors name the file, line and field and say how to fix it, in the same :class:`~gpufleet.api.errors.Problems`
form as manifest errors. The file::

    schedulerName: gpufleet
    leaderElection:
      leaseName: gpufleet-scheduler
      namespace: gpufleet-system        # default: $POD_NAMESPACE, else gpufleet-system
      leaseDuration: 15s
      renewDeadline: 10s
      retryPeriod: 2s
    cyclePeriod: 5m                     # resync: the longest wait between cycles when nothing changes
    metricsBindAddress: ":8080"
    healthProbeBindAddress: ":8081"
    placementProfile: gpufleet          # a profile of gpufleet.scheduling.placement
    quotaOnly: false                    # true: admit by quota alone and place no pod (see SchedulerSettings)
    kueue:                              # Kueue's Configuration, embedded ...
      fairSharing: {enable: true}
      waitForPodsReady: {enable: true, timeout: 5m}
    # kueueConfigFile: /etc/kueue/controller_manager_config.yaml   # ... or referenced
    binding: {workers: 16, retries: 5, retryBackoff: 100ms, gangRepairTimeout: 60s, assumeTimeout: 30s}
    clientConnection: {qps: 1000, burst: 2000}   # client-side rate limit of API calls (ClientConnectionSettings)
    preemption: {disruptionBudgetBackoff: 60s}
    webhook: {enabled: false, bindAddress: ":9443", certFile: ..., keyFile: ..., runtimeClassName: nvidia,
              workers: 8, queue: 16, handshakeTimeout: 5s, readTimeout: 10s}
    secureMetrics: {enabled: false, certFile: ..., keyFile: ...}   # HTTPS + TokenReview/SubjectAccessReview
    queues: {source: auto}              # auto | kueue | gpufleet: whose queue objects (see QueueSettings)
    besideKueue:                        # Kueue's own controller admits; gpufleet places (docs/beside-kueue.md)
      enabled: false
      admissionCheckController: gpufleet.io/placement
    lint:                               # the validating webhook: per lint rule deny | warn | off (docs/lint.md)
      rules: {gpu-model-unconstrained: deny}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from gpufleet.admission.lint_settings import LintSettings, parse_lint_settings
from gpufleet.admission.webhook_settings import WebhookSettings
from gpufleet.api.errors import ManifestErrors, Problems, shown
from gpufleet.api.kinds import parse_configuration, parse_duration
from gpufleet.api.manifests import load_manifests
from gpufleet.api.objects import SchedulerConfig
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import load_text
from gpufleet.k8s.serving import parse_address

KIND = "SchedulerConfiguration"
DEFAULT_NAMESPACE = "gpufleet-system"


class SettingsError(ManifestErrors):
    """The configuration file is invalid; ``errors`` lists every problem with its field and fix."""


@dataclass(frozen=True, slots=True)
class LeaderElectionSettings:
    lease_name: str = "gpufleet-scheduler"
    namespace: str = DEFAULT_NAMESPACE
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass(frozen=True, slots=True)
class BindingSettings:
    workers: int = 16  # concurrent API writers: workloads are bound in parallel, a gang's pods in order
    retries: int = 5
    retry_backoff: float = 0.1
    gang_repair_timeout: float = 60.0
    assume_timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class ClientConnectionSettings:
    """Client-side rate limits on API calls, KubeSchedulerConfiguration's ``clientConnection``: a token bucket of
    ``qps`` calls per second, ``burst`` at once (gpufleet.k8s.ratelimit; ``qps`` 0 or less: no limit). The
    scheduler keeps two such buckets, as kube-scheduler keeps two clients: one for its writes (Bindings,
    evictions, conditions, queue statuses), one for its Events. Informers' reads (a list per resource at start
    and after a 410, then watches) and the leader election are not limited: a renewal must never wait behind
    a burst of Bindings. kube-scheduler's defaults (50, 100) cap it near 50 pods/s; these are YuniKorn's
    order of magnitude, and the API server's priority and fairness still protects itself (a 429 is retried)."""

    qps: float = 1000.0
    burst: int = 2000


@dataclass(frozen=True, slots=True)
class SecureMetricsSettings:
    """``/metrics`` over HTTPS, each scrape's bearer token checked with a TokenReview and its user authorized
    with a SubjectAccessReview (``get`` on the non-resource URL ``/metrics``), as controller-runtime's
    ``WithAuthenticationAndAuthorization`` filter does."""

    enabled: bool = False
    cert_file: str = "/var/run/gpufleet/metrics/tls.crt"
    key_file: str = "/var/run/gpufleet/metrics/tls.key"


QueueSource = Literal["auto", "kueue", "gpufleet"]
QUEUE_SOURCES: tuple[str, ...] = ("auto", "kueue", "gpufleet")
PLACEMENT_CHECK_CONTROLLER = "gpufleet.io/placement"


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Whose queue objects the scheduler reads: Kueue's (``kueue.x-k8s.io/v1beta1``), gpufleet's
    (``gpufleet.io/v1alpha1``, the same kinds under gpufleet's group), or ``auto``: Kueue's where the cluster
    serves them and holds a ClusterQueue, else gpufleet's (gpufleet.live.queuesource)."""

    source: QueueSource = "auto"


@dataclass(frozen=True, slots=True)
class BesideKueueSettings:
    """Kueue's own controller admits (quota, fair sharing, preemption); gpufleet places the pods of the
    Workloads Kueue admitted, on the flavor's nodes, and answers the AdmissionChecks whose controllerName is
    ``admission_check_controller`` (gpufleet.live.beside)."""

    enabled: bool = False
    admission_check_controller: str = PLACEMENT_CHECK_CONTROLLER


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    scheduler_name: str = "gpufleet"
    leader_election: LeaderElectionSettings = field(default_factory=LeaderElectionSettings)
    # A resync: the longest wait between cycles when nothing changes and no timer falls due (changes and timers
    # wake a cycle at once; kube-scheduler flushes its unschedulable pods after 5 minutes alike).
    cycle_period: float = 300.0
    min_cycle_interval: float = 0.02  # coalesces a burst of watch events into one cycle
    max_cycles_per_round: int = 10_000
    round_budget: float = 2.0  # seconds of policy cycles before the decisions so far are carried out
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    placement_profile: str = "gpufleet"
    # Admit workloads by quota alone, placing no pod (for a dry run, or where another component places pods).
    # Off, pods are placed, and with no node to take them they stay pending and Unschedulable, which is what
    # makes a cluster autoscaler scale up, from zero nodes too.
    quota_only: bool = False
    kueue: SchedulerConfig = field(default_factory=SchedulerConfig)
    binding: BindingSettings = field(default_factory=BindingSettings)
    client_connection: ClientConnectionSettings = field(default_factory=ClientConnectionSettings)
    disruption_budget_backoff: float = 60.0
    webhook: WebhookSettings = field(default_factory=WebhookSettings)
    secure_metrics: SecureMetricsSettings = field(default_factory=SecureMetricsSettings)
    queues: QueueSettings = field(default_factory=QueueSettings)
    beside_kueue: BesideKueueSettings = field(default_factory=BesideKueueSettings)
    lint: LintSettings = field(default_factory=LintSettings)  # what the validating webhook does per lint rule


_TOP = ("apiVersion", "kind", "schedulerName", "leaderElection", "cyclePeriod", "minCycleInterval",
        "maxCyclesPerRound", "roundBudget", "metricsBindAddress", "healthProbeBindAddress", "placementProfile",
        "quotaOnly", "kueue", "kueueConfigFile", "binding", "preemption", "webhook", "secureMetrics", "queues",
        "besideKueue", "lint", "clientConnection")
_QUEUES = ("source",)
_BESIDE_KUEUE = ("enabled", "admissionCheckController")
_LEADER = ("leaseName", "namespace", "leaseDuration", "renewDeadline", "retryPeriod")
_BINDING = ("workers", "retries", "retryBackoff", "gangRepairTimeout", "assumeTimeout")
_CLIENT_CONNECTION = ("qps", "burst")
_PREEMPTION = ("disruptionBudgetBackoff",)
_WEBHOOK = ("enabled", "bindAddress", "certFile", "keyFile", "runtimeClassName", "requireMutation", "workers", "queue",
            "handshakeTimeout", "readTimeout")
_SECURE_METRICS = ("enabled", "certFile", "keyFile")
_KUEUE = ("apiVersion", "kind", "fairSharing", "waitForPodsReady", "namespace", "manageJobsWithoutQueueName",
          "integrations", "resources", "queueVisibility", "featureGates")


def _unknown(r: FieldReader, known: tuple[str, ...]) -> None:
    if not isinstance(r.value, Mapping):
        return
    for key in r.value:
        if key not in known:
            r.error(f"unknown field {key}", str(key), fix=f"remove it or fix its spelling; known fields: "
                    f"{', '.join(k for k in known if k not in ('apiVersion', 'kind'))}")


def _string(r: FieldReader, key: str, default: str | None = None) -> str | None:
    """A string field: :meth:`FieldReader.text`, which also turns a YAML number into text, refusing numbers
    (``schedulerName: 5``), which would otherwise pass unseen as a name, a path or a controller."""
    raw = r.raw(key)
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        r.error(f"expected a string, got the number {shown(raw)}", key,
                fix=f'write a string; quote it if the number is meant: {key}: "{shown(raw)}"')
        return default
    return r.text(key, default)


def _duration(r: FieldReader, key: str, default: float, *, allow_zero: bool = False) -> float:
    raw = r.raw(key)
    if raw is None:
        return default
    value = parse_duration(str(raw))
    if value is None or value < 0 or (value == 0 and not allow_zero):
        r.error(f"{raw!r} is not a {'non-negative' if allow_zero else 'positive'} duration", key,
                fix="write a duration such as 500ms, 2s, 1m30s")
        return default
    return value


def _address(r: FieldReader, key: str, default: str) -> str:
    value = r.text(key, default) or default  # a number is refused below, with the address form
    if parse_address(value) is None:
        r.error(f"{value!r} is not a listen address", key, fix='write host:port or :port, e.g. ":8080"')
        return default
    return value


def _leader(r: FieldReader | None) -> LeaderElectionSettings:
    namespace = os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE
    if r is None:
        return LeaderElectionSettings(namespace=namespace)
    _unknown(r, _LEADER)
    d = LeaderElectionSettings()
    out = LeaderElectionSettings(
        lease_name=_string(r, "leaseName", d.lease_name) or d.lease_name,
        namespace=_string(r, "namespace", namespace) or namespace,
        lease_duration=_duration(r, "leaseDuration", d.lease_duration),
        renew_deadline=_duration(r, "renewDeadline", d.renew_deadline),
        retry_period=_duration(r, "retryPeriod", d.retry_period),
    )
    # client-go's rules: the leader gives up before followers may take over, with more than one try.
    if out.lease_duration <= out.renew_deadline:
        r.error(f"renewDeadline ({out.renew_deadline:g}s) must be shorter than leaseDuration "
                f"({out.lease_duration:g}s)", "renewDeadline",
                fix="a leader must step down before its lease can expire for the others; e.g. leaseDuration 15s, "
                    "renewDeadline 10s")
    if out.renew_deadline <= 1.2 * out.retry_period:
        r.error(f"retryPeriod ({out.retry_period:g}s) leaves no second renewal attempt within renewDeadline "
                f"({out.renew_deadline:g}s)", "retryPeriod",
                fix="make renewDeadline more than 1.2 x retryPeriod, e.g. retryPeriod 2s with renewDeadline 10s")
    return out


def _kueue(r: FieldReader, base: Path, problems: Problems) -> SchedulerConfig:
    embedded = r.obj("kueue")
    ref = _string(r, "kueueConfigFile")
    if embedded is not None and ref is not None:
        r.error("both kueue and kueueConfigFile are set", "kueueConfigFile",
                fix="keep one: embed the Configuration under kueue, or reference its file")
        return SchedulerConfig()
    if embedded is not None:
        _unknown(embedded, _KUEUE)
        return parse_configuration(embedded)
    if ref is None:
        return SchedulerConfig()
    path = Path(ref) if Path(ref).is_absolute() else base / ref
    if not path.is_file():
        r.error(f"kueueConfigFile {ref} does not exist", "kueueConfigFile",
                fix="point it at a config.kueue.x-k8s.io/v1beta1 Configuration file")
        return SchedulerConfig()
    loaded = load_manifests([str(path)])
    problems.extend(loaded.problems.all)
    if loaded.config is None and not loaded.problems.errors:
        r.error(f"{ref} holds no Kueue Configuration", "kueueConfigFile",
                fix="the file needs apiVersion: config.kueue.x-k8s.io/v1beta1 and kind: Configuration")
    return loaded.config or SchedulerConfig()


def _binding(r: FieldReader | None) -> BindingSettings:
    d = BindingSettings()
    if r is None:
        return d
    _unknown(r, _BINDING)
    return BindingSettings(
        workers=r.integer("workers", d.workers, minimum=1) or d.workers,
        retries=r.integer("retries", d.retries, minimum=0) or 0,
        retry_backoff=_duration(r, "retryBackoff", d.retry_backoff),
        gang_repair_timeout=_duration(r, "gangRepairTimeout", d.gang_repair_timeout),
        assume_timeout=_duration(r, "assumeTimeout", d.assume_timeout),
    )


def _client_connection(r: FieldReader | None) -> ClientConnectionSettings:
    d = ClientConnectionSettings()
    if r is None:
        return d
    _unknown(r, _CLIENT_CONNECTION)
    qps = r.number("qps", d.qps)
    burst = r.integer("burst", d.burst, minimum=1)
    return ClientConnectionSettings(qps=d.qps if qps is None else qps, burst=burst or d.burst)


def _webhook(r: FieldReader | None) -> WebhookSettings:
    d = WebhookSettings()
    if r is None:
        return d
    _unknown(r, _WEBHOOK)
    out = WebhookSettings(
        enabled=r.flag("enabled", d.enabled),
        bind_address=_address(r, "bindAddress", d.bind_address),
        cert_file=_string(r, "certFile", d.cert_file) or d.cert_file,
        key_file=_string(r, "keyFile", d.key_file) or d.key_file,
        runtime_class_name=_string(r, "runtimeClassName") or None,
        require_mutation=r.flag("requireMutation", d.require_mutation),
        workers=_bounded(r, "workers", d.workers, 256),
        queue=_bounded(r, "queue", d.queue, 4096),
        handshake_timeout=_duration(r, "handshakeTimeout", d.handshake_timeout),
        read_timeout=_duration(r, "readTimeout", d.read_timeout),
    )
    return out


def _bounded(r: FieldReader, key: str, default: int, top: int) -> int:
    value = r.integer(key, default, minimum=1) or default
    if value > top:
        r.error(f"{key} {value:,} is more than {top:,}", key,
                fix=f"each one is a thread or a held connection: use at most {top:,}")
        return default
    return value


def _secure_metrics(r: FieldReader | None) -> SecureMetricsSettings:
    d = SecureMetricsSettings()
    if r is None:
        return d
    _unknown(r, _SECURE_METRICS)
    return SecureMetricsSettings(
        enabled=r.flag("enabled", d.enabled),
        cert_file=_string(r, "certFile", d.cert_file) or d.cert_file,
        key_file=_string(r, "keyFile", d.key_file) or d.key_file,
    )


def _queues(r: FieldReader | None) -> QueueSettings:
    if r is None:
        return QueueSettings()
    _unknown(r, _QUEUES)
    return QueueSettings(source=cast(QueueSource, r.enum("source", QUEUE_SOURCES, "auto")))


def _beside_kueue(r: FieldReader | None) -> BesideKueueSettings:
    d = BesideKueueSettings()
    if r is None:
        return d
    _unknown(r, _BESIDE_KUEUE)
    controller = _string(r, "admissionCheckController", d.admission_check_controller) or d.admission_check_controller
    return BesideKueueSettings(enabled=r.flag("enabled", d.enabled), admission_check_controller=controller)


def _profile(r: FieldReader, default: str) -> str:
    from gpufleet.scheduling.placement import PROFILE_NAMES

    value = _string(r, "placementProfile", default) or default
    if value.strip().lower() not in PROFILE_NAMES:
        r.error(f"unknown placement profile {value!r}", "placementProfile",
                fix=f"use one of {', '.join(PROFILE_NAMES)}")
        return default
    return value.strip().lower()


def parse_settings(r: FieldReader, base: Path) -> SchedulerSettings:
    d = SchedulerSettings()
    if not isinstance(r.value, Mapping):
        r.error("the configuration must be a mapping", fix="write key: value pairs, e.g. schedulerName: gpufleet")
        return d
    _unknown(r, _TOP)
    kind = _string(r, "kind")
    if kind is not None and kind != KIND:
        r.error(f"kind {kind!r} is not {KIND}", "kind", fix=f"set kind: {KIND} or leave it out")
    preemption = r.obj("preemption")
    if preemption is not None:
        _unknown(preemption, _PREEMPTION)
    name = _string(r, "schedulerName", d.scheduler_name) or d.scheduler_name
    out = SchedulerSettings(
        scheduler_name=name,
        leader_election=_leader(r.obj("leaderElection")),
        cycle_period=_duration(r, "cyclePeriod", d.cycle_period),
        min_cycle_interval=_duration(r, "minCycleInterval", d.min_cycle_interval, allow_zero=True),
        max_cycles_per_round=r.integer("maxCyclesPerRound", d.max_cycles_per_round, minimum=1) or 1,
        round_budget=_duration(r, "roundBudget", d.round_budget),
        metrics_bind_address=_address(r, "metricsBindAddress", d.metrics_bind_address),
        health_probe_bind_address=_address(r, "healthProbeBindAddress", d.health_probe_bind_address),
        placement_profile=_profile(r, d.placement_profile),
        quota_only=r.flag("quotaOnly", d.quota_only),
        kueue=_kueue(r, base, r.problems),
        binding=_binding(r.obj("binding")),
        client_connection=_client_connection(r.obj("clientConnection")),
        disruption_budget_backoff=_duration(preemption, "disruptionBudgetBackoff", d.disruption_budget_backoff)
        if preemption is not None else d.disruption_budget_backoff,
        webhook=_webhook(r.obj("webhook")),
        secure_metrics=_secure_metrics(r.obj("secureMetrics")),
        queues=_queues(r.obj("queues")),
        beside_kueue=_beside_kueue(r.obj("besideKueue")),
        lint=parse_lint_settings(r.obj("lint")),
    )
    if out.beside_kueue.enabled and out.queues.source == "gpufleet":
        r.error("besideKueue reads Kueue's own objects, not gpufleet.io's", "queues", "source",
                fix="set queues.source: kueue (or auto), or turn besideKueue.enabled off")
    if out.beside_kueue.enabled and out.quota_only:
        r.error("besideKueue places pods and quotaOnly places none", "quotaOnly",
                fix="beside Kueue, Kueue admits by quota and gpufleet places: remove quotaOnly")
    if out.secure_metrics.enabled and out.metrics_bind_address == out.health_probe_bind_address:
        r.error("secureMetrics needs a metrics port of its own", "metricsBindAddress",
                fix='the kubelet calls the probes over plain HTTP: give metricsBindAddress and '
                    'healthProbeBindAddress different ports, e.g. ":8443" and ":8081"')
    return out


def settings_from_text(text: str, file: str = "<config>") -> tuple[SchedulerSettings, Problems]:
    problems = Problems()
    docs = load_text(text, file, problems)
    if len(docs) > 1:
        problems.error("the configuration file holds more than one document", file=file, line=docs[1].line,
                       fix="keep a single YAML document")
    if not docs:
        if not problems.errors:
            return SchedulerSettings(leader_election=_leader(None)), problems
        return SchedulerSettings(), problems
    r = FieldReader(docs[0], problems, kind=KIND, name=None)
    return parse_settings(r, Path(file).parent), problems


def load_settings(path: str | None) -> SchedulerSettings:
    """The settings of ``path`` (defaults when None); raises :class:`SettingsError` listing every error."""
    if path is None:
        return SchedulerSettings(leader_election=_leader(None))
    try:
        text = Path(path).read_text()
    except OSError as e:
        problems = Problems()
        problems.error(f"cannot read the configuration: {e.strerror}", file=path,
                       fix="check the --config path (the Deployment mounts it at /etc/gpufleet/config.yaml)")
        raise SettingsError(problems.errors) from e
    settings, problems = settings_from_text(text, path)
    if problems.errors:
        raise SettingsError(problems.errors)
    return settings
