"""The fix a too-many-devices error gives is true of the machine: applied, the machine fits the limit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from machines import write_machine

from gpufleet.node.discovery import DiscoveryError, _fewer_replicas, discover
from gpufleet.node.dpconfig import load_device_config
from gpufleet.node.nvml_fake import FakeNvml

_MACHINE = ("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: big}\nspec:\n  count: 1\n"
            "  gpu: {model: A100-SXM4-80GB, count: 64, migLayout: \"3g.40gb,2g.20gb,1g.10gb:2\"}\n"
            "  cpu: \"256\"\n  memory: 4Ti\n  sharing: {migStrategy: mixed}\n")


def _config(replicas: dict[str, int]) -> str:
    items = "".join(f"    - name: {r}\n      replicas: {n}\n" for r, n in replicas.items())
    return f"version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n{items}"


def test_two_resources_at_64_replicas_get_a_fix_that_fits(tmp_path: Path) -> None:
    machine = FakeNvml(str(write_machine(tmp_path, _MACHINE))).machine()
    config = tmp_path / "c.yaml"
    config.write_text(_config({"nvidia.com/mig-1g.10gb": 64, "nvidia.com/mig-2g.20gb": 64}))
    with pytest.raises(DiscoveryError) as caught:
        discover(machine, load_device_config(str(config)), timestamp=0)
    fix = str(caught.value).split("fix: ", 1)[1]
    assert "stop time-slicing nvidia.com/mig-1g.10gb" not in fix  # alone it leaves 4,288 devices
    found = re.fullmatch(r"lower the replicas of (.+) to at most (\d+) \(([\d,]+) devices\)", fix)
    assert found is not None, fix
    names, cap = found.group(1).split(" and "), int(found.group(2))
    assert sorted(names) == ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"] and cap == 21
    config.write_text(_config(dict.fromkeys(names, cap)))
    fits = discover(machine, load_device_config(str(config)), timestamp=0)
    assert sum(fits.resources.values()) == int(found.group(3).replace(",", "")) <= 4096


def test_where_lowering_is_not_enough_the_fix_stops_what_it_must() -> None:
    physical = {"a": 3000, "b": 1000}
    counts = {"a": 3000 * 64, "b": 1000 * 64, "c": 10}
    assert _fewer_replicas(counts, physical, lambda r: 64) == "stop time-slicing a and b (4,010 devices)"
    physical = {"a": 3000, "b": 500}
    counts = {"a": 3000 * 64, "b": 500 * 64}
    assert _fewer_replicas(counts, physical, lambda r: 64) == ("stop time-slicing a, and lower the replicas of b to "
                                                                "at most 2 (4,000 devices)")
