"""NVIDIA's device-plugin config file read as users have it; errors name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from machines import WHOLE_8, write_machine

from gpufleet.node.discovery import discover
from gpufleet.node.dpconfig import DpConfigError, load_device_config
from gpufleet.node.nvml_fake import FakeNvml

# A ConfigMap value as NVIDIA's Helm chart documents it, every section present.
NVIDIA_FILE = """\
version: v1
flags:
  migStrategy: mixed
  failOnInitError: true
  nvidiaDriverRoot: /
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: [envvar, cdi-cri]
    deviceIDStrategy: uuid
    sharedDevicesAllocationPolicy: packed
  gfd:
    oneshot: false
    noTimestamp: true
    sleepInterval: 60s
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_nvidias_file_is_read_unchanged(tmp_path: Path) -> None:
    config = load_device_config(write(tmp_path, NVIDIA_FILE))
    assert config.sharing.mig_strategy == "mixed"
    assert dict(config.sharing.time_slicing) == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 2}
    assert config.sharing.fail_requests_greater_than_one and not config.sharing.rename_by_default
    assert config.plugin.device_list_strategy == ("envvar", "cdi-cri")
    assert config.plugin.shared_allocation_policy == "packed"
    assert config.no_timestamp
    # Accepted for compatibility, and said to have no effect rather than silently dropped.
    warned = {w.field for w in config.warnings}
    assert {"flags.failOnInitError", "flags.plugin.passDeviceSpecs", "flags.gfd.sleepInterval"} <= warned


def test_bad_fields_are_all_reported_with_file_line_and_field(tmp_path: Path) -> None:
    text = NVIDIA_FILE.replace("replicas: 4", "replicas: 1").replace("migStrategy: mixed", "migStrategy: mixd")
    text = text.replace("deviceIDStrategy: uuid", "deviceIDStrategy: uuid\n    deviceListStrategy2: envvar")
    path = write(tmp_path, text)
    with pytest.raises(DpConfigError) as caught:
        load_device_config(path)
    errors = {e.field: e for e in caught.value.errors if e.severity == "error"}
    lines = text.splitlines()
    assert errors["flags.migStrategy"].line == 1 + lines.index("  migStrategy: mixd")
    assert errors["sharing.timeSlicing.resources[0].replicas"].line == 1 + lines.index("      replicas: 1")
    assert errors["flags.plugin.deviceListStrategy2"].message == "unknown field deviceListStrategy2"
    assert all(e.file == path for e in errors.values())
    assert f"{path}:{errors['flags.migStrategy'].line}" in str(errors["flags.migStrategy"])


@pytest.mark.parametrize(("text", "field", "words"), [
    ("version: v2\n", "version", "unsupported version"),
    ("sharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n", "sharing.mps", "MPS"),
    ("sharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]\n",
     "sharing.timeSlicing.resources[0].name", "migStrategy mixed"),
    ("flags:\n  plugin:\n    deviceListStrategy: [envvar, carrier-pigeon]\n", "flags.plugin.deviceListStrategy",
     "unknown device list strategy"),
    ("sharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu}]\n",
     "sharing.timeSlicing.resources[0].replicas", "missing required field"),
])
def test_each_kind_of_mistake(tmp_path: Path, text: str, field: str, words: str) -> None:
    with pytest.raises(DpConfigError) as caught:
        load_device_config(write(tmp_path, text))
    [error] = [e for e in caught.value.errors if e.severity == "error"]
    assert error.field == field and words in error.message and error.line is not None


def test_yaml_syntax_errors_and_missing_files_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "version: v1\nflags: [unclosed\n")
    with pytest.raises(DpConfigError) as caught:
        load_device_config(path)
    assert caught.value.errors[0].file == path and caught.value.errors[0].line is not None
    with pytest.raises(DpConfigError, match="cannot read"):
        load_device_config(str(tmp_path / "nope.yaml"))


def test_config_overrides_the_machines_own_sharing(tmp_path: Path) -> None:
    fake = FakeNvml(str(write_machine(tmp_path, WHOLE_8)))
    config = load_device_config(write(tmp_path, "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                                                "    resources: [{name: nvidia.com/gpu, replicas: 3, rename: x}]\n"))
    assert [w.field for w in config.warnings] == ["sharing.timeSlicing.resources[0].rename"]
    found = discover(fake.machine(), config, timestamp=0)
    assert found.resources == {"nvidia.com/gpu.shared": 24}
