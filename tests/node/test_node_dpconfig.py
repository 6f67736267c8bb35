"""NVIDIA's device-plugin config file read as users have it; errors name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from machines import WHOLE_8, write_machine

from gpufleet.api import limits
from gpufleet.node.discovery import DiscoveryError, discover
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


# --- limits (issue 30, item 4): bounded where the file is read, before any device is made ---------------------

def _replicas(n: int, resource: str = "nvidia.com/gpu", mig: str = "none") -> str:
    return (f"version: v1\nflags:\n  migStrategy: {mig}\nsharing:\n  timeSlicing:\n    resources:\n"
            f"    - name: {resource}\n      replicas: {n}\n")


@pytest.mark.parametrize("replicas", [65, 1_000_000])
def test_replicas_above_64_per_gpu_are_refused_with_line_limit_and_fix(tmp_path: Path, replicas: int) -> None:
    path = write(tmp_path, _replicas(replicas))
    with pytest.raises(DpConfigError) as caught:
        load_device_config(path)
    [error] = caught.value.errors
    assert (error.file, error.line, error.field) == (path, 8, "sharing.timeSlicing.resources[0].replicas")
    assert "at most 64" in error.message and error.fix == "use a value of at most 64"


def test_64_replicas_per_gpu_are_accepted(tmp_path: Path) -> None:
    fake = FakeNvml(str(write_machine(tmp_path, WHOLE_8)))
    found = discover(fake.machine(), load_device_config(write(tmp_path, _replicas(64))), timestamp=0)
    assert found.resources == {"nvidia.com/gpu": 8 * 64}


def _big_machine(layout: str | None) -> str:
    mig = f', migLayout: "{layout}"' if layout else ""
    sharing = "\n  sharing: {migStrategy: mixed}" if layout else ""
    return ("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: big}\nspec:\n  count: 1\n"
            f"  gpu: {{model: A100-SXM4-80GB, count: 64{mig}}}\n  cpu: \"256\"\n  memory: 4Ti{sharing}\n")


def test_a_node_may_advertise_4096_devices_and_no_more(tmp_path: Path) -> None:
    # 64 GPUs x 64 replicas: exactly gpufleet's limit on the GPU devices of a node.
    whole = FakeNvml(str(write_machine(tmp_path, _big_machine(None), "whole.yaml")))
    found = discover(whole.machine(), load_device_config(write(tmp_path, _replicas(64))), timestamp=0)
    assert found.resources == {"nvidia.com/gpu": 4096}
    # 64 GPUs x 7 MIG devices x 64 replicas would be 28,672: refused before one is made, naming the field.
    mig = FakeNvml(str(write_machine(tmp_path, _big_machine("1g.10gb:7"), "mig.yaml")))
    path = write(tmp_path, _replicas(64, "nvidia.com/mig-1g.10gb", "mixed"))
    with pytest.raises(DiscoveryError) as caught:
        discover(mig.machine(), load_device_config(path), timestamp=0)
    said = str(caught.value)
    assert said.startswith(f"{path}:8: device-plugin config: sharing.timeSlicing.resources[0].replicas: ")
    assert "28,672 GPU devices" in said and "at most 4,096" in said
    assert said.endswith("fix: lower the replicas of nvidia.com/mig-1g.10gb to at most 9")  # 448 x 9 = 4,032


def test_a_config_that_is_not_a_small_regular_utf8_file_is_refused(tmp_path: Path) -> None:
    not_utf8 = tmp_path / "latin1.yaml"
    not_utf8.write_bytes(b"version: v1\n# caf\xe9\n")
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as fh:
        fh.truncate(limits.MAX_CONFIG_BYTES + 1)  # sparse: costs no disk
    # A FIFO is refused the same way: tests/hostile/test_input_limits_everywhere.py tries one, under an alarm.
    for path, words in ((not_utf8, "not UTF-8 text"), (huge, "1 MiB"), (Path("/dev/zero"), "not a regular file")):
        with pytest.raises(DpConfigError) as caught:
            load_device_config(str(path))
        [error] = caught.value.errors
        assert error.file == str(path) and words in error.message and error.fix, error
