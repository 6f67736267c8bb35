"""Property-based fuzzing of the inputs beside manifests (issue 30): openb CSVs, NVIDIA's device-plugin config and
the dashboard's simulation result. Whatever the file holds, the reader gives a value or problems that name the
file, never an exception. Bounded in examples so that the module runs in seconds."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.api.errors import MAX_MESSAGE_CHARS
from gpufleet.node.dpconfig import config_from_text
from gpufleet.sim.openb import read_nodes, read_pods
from gpufleet.web.source_simulation import SimulationResultError, load_result

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NODE_HEADER = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
POD_HEADER = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
              "creation_time", "deletion_time", "scheduled_time"]
# Values of every shape a hostile cell takes: plain, huge, signed, Unicode digits, quotes, separators, markup.
CELLS = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.sampled_from(["", "0", "1000", "+5", "1_000", "٣", "²", "1e999", "nan", "-0", "9" * 19, "9" * 400,
                     '"', '""', "a,b", "x\ny", "<b>", "T4|P100", "\x00"]),
    st.text(max_size=40),
)


def _csv(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(",".join(row) for row in [header, *rows]) + "\n"


def _write(data: str | bytes, suffix: str) -> Path:
    with tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False) as fh:
        fh.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return Path(fh.name)


def _bounded(problems: list[str], path: Path) -> None:
    for problem in problems:
        assert problem.startswith(str(path)), problem
        assert len(problem) < len(str(path)) + 3 * MAX_MESSAGE_CHARS


@FUZZ
@given(st.lists(st.lists(CELLS, min_size=0, max_size=13), max_size=8), st.booleans())
def test_any_csv_rows_give_records_or_problems(rows: list[list[str]], nodes: bool) -> None:
    header = NODE_HEADER if nodes else POD_HEADER
    path = _write(_csv(header, rows), ".csv")
    try:
        records, report = (read_nodes if nodes else read_pods)(path)
    finally:
        path.unlink()
    assert len(records) == report.rows_accepted and report.rows_rejected <= report.rows_read
    assert len(report.problems) >= (1 if report.rows_rejected else 0)
    _bounded(report.problems, path)


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_as_a_csv_give_records_or_problems(data: bytes) -> None:
    path = _write(b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + data, ".csv")
    try:
        _, report = read_pods(path)
    finally:
        path.unlink()
    _bounded(report.problems, path)


YAML_VALUES = st.one_of(st.integers(min_value=-(10**30), max_value=10**30), st.booleans(), st.none(),
                        st.text(max_size=20), st.sampled_from(["1e999", ".nan", "-.inf", "0x10", "٣", "1000000"]))
RESOURCES = st.lists(st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "x"]) | YAML_VALUES,
    "replicas": YAML_VALUES, "rename": YAML_VALUES, "devices": YAML_VALUES}), max_size=3)
CONFIGS = st.fixed_dictionaries({}, optional={
    "version": YAML_VALUES | st.just("v1"),
    "flags": st.fixed_dictionaries({}, optional={"migStrategy": YAML_VALUES | st.sampled_from(["none", "mixed"]),
                                                 "plugin": st.dictionaries(st.text(max_size=8), YAML_VALUES)}),
    "sharing": st.fixed_dictionaries({}, optional={
        "timeSlicing": st.fixed_dictionaries({}, optional={"resources": RESOURCES | YAML_VALUES,
                                                           "renameByDefault": YAML_VALUES}),
        "mps": st.fixed_dictionaries({}, optional={"resources": RESOURCES})}),
})


@FUZZ
@given(CONFIGS)
def test_any_device_plugin_config_gives_a_config_or_problems(doc: dict[str, object]) -> None:
    config, problems = config_from_text(json.dumps(doc), "c.yaml")
    if not problems.errors:
        assert all(2 <= n <= 64 for n in config.sharing.time_slicing.values())
    assert all(p.file == "c.yaml" for p in problems.all)


@FUZZ
@given(st.text(max_size=400))
def test_any_text_as_a_device_plugin_config_gives_a_config_or_problems(text: str) -> None:
    _, problems = config_from_text(text, "c.yaml")
    assert all(p.file == "c.yaml" for p in problems.all)


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=10))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=30)
RAW_NUMBERS = st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "9" * 5000, "[" * 100 + "]" * 100, "{"])


@FUZZ
@given(JSON_VALUES, st.one_of(st.none(), RAW_NUMBERS))
def test_any_json_as_a_simulation_result_is_read_or_refused(value: object, raw: str | None) -> None:
    # A raw literal beside the value: what json.dumps never writes (1e999, NaN, 5,000 digits, deep or broken).
    path = _write('{"runs": [' + json.dumps(value) + (f", {raw}" if raw else "") + "]}", ".json")
    try:
        try:
            load_result(path)
        except SimulationResultError as e:
            assert str(path) in str(e)
    finally:
        path.unlink()

