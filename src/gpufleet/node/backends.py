"""``--nvml real|fake:MACHINE``: which NVML backend the agent and ``discover`` use, opened with clear errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.gpu.sharing import DevicePluginConfig
from gpufleet.node.contract import HolderCounts, NvmlBackend, NvmlError
from gpufleet.node.dpconfig import DEFAULT_MACHINE_TYPE_FILE

FAKE_PREFIX = "fake:"


@dataclass(frozen=True, slots=True)
class OpenedBackend:
    backend: NvmlBackend
    # The machine's own device-plugin sharing (a fake MACHINE's NodePool says it; real NVML does not know it,
    # so NVIDIA's defaults). --config overrides it.
    sharing: DevicePluginConfig
    description: str


def check_spec(spec: str) -> str | None:
    """What is wrong with an ``--nvml`` value, or None."""
    if spec == "real":
        return None
    if spec.startswith(FAKE_PREFIX) and spec[len(FAKE_PREFIX):].strip():
        return None
    return f"{spec!r} is neither real nor fake:MACHINE (a NodePool YAML file)"


def open_backend(spec: str, *, holders: Callable[[], HolderCounts] | None = None,
                 machine_type_file: str | None = DEFAULT_MACHINE_TYPE_FILE) -> OpenedBackend:
    """The backend ``spec`` names; :class:`NvmlError` saying what to do when it cannot be opened."""
    problem = check_spec(spec)
    if problem is not None:
        raise NvmlError(f"--nvml: {problem}")
    if spec == "real":
        from gpufleet.node.nvml_real import RealNvml, load_pynvml

        return OpenedBackend(RealNvml(load_pynvml(), machine_type_file=machine_type_file), DevicePluginConfig(),
                             "NVML")
    from gpufleet.node.nvml_fake import FakeNvml

    path = spec[len(FAKE_PREFIX):]
    fake = FakeNvml(path, holders=holders)
    return OpenedBackend(fake, fake.sharing, f"fake machine {fake.spec.node_name} from {path}")
