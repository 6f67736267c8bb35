"""What the what-if page shows beside the runs: an advice (``gpufleet advise -o DIR`` writes it into
``whatif.json``) and a calibration's fit (``gpufleet simulate --calibrate ... --json``).

Both are checked when the file is read, against the schemas defined here (``AdviceDocument``,
``CalibrationDocument``; the OpenAPI document holds them among its components), so a wrong file is refused at
start naming the field. The API answers them with the words the command line and the reports use: the
advice's scores as :mod:`gpufleet.advise.reasons` says them, the fit's rows as
:class:`gpufleet.sim.calibrate.Calibration` says them (its ``target_rows`` and ``knob_rows``), beside the
numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.advise.reasons import kpi_text, kpi_words
from gpufleet.sim.calibrate import (
    ATTRIBUTIONS,
    BOUNDS,
    KNOB_TEXT,
    KNOBS,
    TARGETS,
    TOLERANCE,
    Calibration,
    Knobs,
    Targets,
)
from gpufleet.web.schema_check import BOOL, INT, NNUM, NSTR, NUM, OBJECT, STR, array, mismatch, obj, ref

Doc = dict[str, Any]

# What gpufleet advise -o DIR writes into whatif.json beside the runs (advise/files.py, advice_document): the
# given configuration and the proposal judged, the reasons, the files. "AdviceDocument" is checked when the file
# is read; the API answers it as "Advice", with the scores in words added.
_JUDGED_FIELDS: dict[str, Any] = {
    "name": STR, "given": BOOL, "score": NUM, "withinGuards": BOOL, "pools": array(ref("PoolConfig")),
    "requests": array(ref("ClassRequest")), "quotas": array(ref("QuotaLine")), "kpis": OBJECT, "perQueue": OBJECT}
_ADVICE_FIELDS: dict[str, Any] = {
    "input": STR, "objective": STR, "budgetPerHour": NNUM, "changed": BOOL, "given": ref("Judged"),
    "proposal": ref("Judged"), "tried": array(ref("Tried")), "reasons": array(STR), "notes": array(STR),
    "files": array(ref("AdviceFile"))}
ADVICE_SCHEMAS: dict[str, Any] = {
    "NodeConfig": obj({"mode": {"enum": ["exclusive", "time-sliced", "mig"]}, "text": STR},
                      {"replicas": INT, "mig": {"type": "object", "additionalProperties": INT}}),
    "PoolConfig": obj({"pool": STR, "model": STR, "gpusPerNode": INT, "config": ref("NodeConfig"),
                       "labels": {"type": "object", "additionalProperties": STR}, "nodes": array(STR)}),
    "ClassRequest": obj({"class": STR, "namespace": STR, "queue": NSTR, "resource": STR, "count": INT,
                         "given": STR}),
    "QuotaLine": obj({"clusterQueue": STR, "flavor": STR, "resource": STR, "nominalQuota": INT}),
    "Judged": obj(_JUDGED_FIELDS, {"whyNot": STR, "simulatedSeconds": NUM}),
    "Tried": obj({"name": STR, "score": NUM, "withinGuards": BOOL, "kpis": OBJECT}, {"whyNot": STR}),
    "AdviceFile": obj({"file": STR, "path": STR, "what": STR, "command": STR, "applies": BOOL}, {"text": NSTR}),
    "AdviceDocument": obj(_ADVICE_FIELDS, extra=True),
    "Score": obj({"key": STR, "label": STR, "given": NNUM, "proposal": NNUM, "givenText": STR,
                  "proposalText": STR}),
    "Advice": obj({**_ADVICE_FIELDS, "scores": array(ref("Score"))}, extra=True),
}

# What simulate --calibrate --json writes as "calibration" (sim/calibrate.py, Calibration.summary), checked when
# the file is read; the API answers it as "Calibration": a row per target and per unknown, numbers and words.
_BY_NAME_NUM: dict[str, Any] = {"type": "object", "additionalProperties": NUM}
_BY_NAME_NNUM: dict[str, Any] = {"type": "object", "additionalProperties": NNUM}
CALIBRATION_SCHEMAS: dict[str, Any] = {
    "CalibrationDocument": obj({
        "targets": _BY_NAME_NUM, "achieved": _BY_NAME_NNUM, "residuals": _BY_NAME_NNUM, "tolerance": _BY_NAME_NUM,
        "knobs": _BY_NAME_NUM, "fitted": array(STR),
        "bounds": {"type": "object", "additionalProperties": {"type": "array", "items": NUM, "minItems": 2,
                                                              "maxItems": 2}},
        "evaluations": INT, "wall_s": NUM, "within_tolerance": BOOL}, extra=True),
    "CalibrationTarget": obj({"name": STR, "label": STR, "target": NUM, "simulated": NNUM, "residual": NNUM,
                              "tolerance": NUM, "met": BOOL,
                              "text": obj({k: STR for k in ("target", "simulated", "residual", "tolerance")})}),
    "CalibrationUnknown": obj({"name": STR, "label": STR, "value": NUM, "low": NUM, "high": NUM, "fitted": BOOL,
                               "text": obj({"value": STR, "bounds": STR})}),
    "Calibration": obj({"observed": STR, "withinTolerance": BOOL, "evaluations": INT, "wallSeconds": NUM,
                        "targets": array(ref("CalibrationTarget")), "unknowns": array(ref("CalibrationUnknown"))}),
}

SCHEMAS: dict[str, Any] = {**ADVICE_SCHEMAS, **CALIBRATION_SCHEMAS}  # among the OpenAPI document's components


def advice_problem(advice: Any, where: str) -> str | None:
    """What is wrong with the ``advice`` beside a result's runs, naming the field; None when it can be shown."""
    problem = mismatch(advice, SCHEMAS["AdviceDocument"], SCHEMAS, where)
    if problem is None:
        for side in ("given", "proposal"):
            kpis = advice[side]["kpis"]
            for key, _, _ in kpi_words(advice["objective"]):
                value = kpis.get(key)
                if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                    problem = f"{where}.{side}.kpis.{key}: expected a number, got {type(value).__name__}"
                    break
            if problem is not None:
                break
    if problem is None:
        return None
    return f"{problem} (gpufleet advise -o DIR writes a whatif.json the dashboard reads; run it again)"


def calibration_problem(calibration: Any, where: str) -> str | None:
    """What is wrong with the ``calibration`` beside a result's runs, naming the field; None when it can be
    shown."""
    problem = mismatch(calibration, SCHEMAS["CalibrationDocument"], SCHEMAS, where)
    if problem is None:
        for field, known in (("targets", (*TARGETS, *ATTRIBUTIONS)), ("knobs", KNOBS), ("bounds", KNOBS)):
            unknown = sorted(set(calibration[field]) - set(known))
            if unknown:
                problem = f"{where}.{field}: unknown {', '.join(map(repr, unknown))}; expected some of " \
                          f"{', '.join(known)}"
                break
        unknown = sorted(set(calibration["fitted"]) - set(KNOBS))
        if problem is None and unknown:
            problem = f"{where}.fitted: unknown {', '.join(map(repr, unknown))}; expected some of {', '.join(KNOBS)}"
    if problem is None:
        return None
    return f"{problem} (gpufleet simulate --calibrate TARGETS --json OUT writes the fit the dashboard reads)"


def advice_answer(advice: Mapping[str, Any]) -> Doc:
    """The advice as the API answers it: as written, with the scores given beside proposal, in words (the
    objective's figures: a simulated run's, or the fragmentation objective's fill-up)."""
    given, proposal = advice["given"]["kpis"], advice["proposal"]["kpis"]
    scores = [{"key": key, "label": words, "given": given.get(key), "proposal": proposal.get(key),
               "givenText": kpi_text(key, given.get(key)), "proposalText": kpi_text(key, proposal.get(key))}
              for key, words, _ in kpi_words(advice["objective"])]
    return {**advice, "scores": scores}


def calibration_answer(calibration: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> Doc:
    """The fit as the API answers it: each target beside the fitted run's figure and the residual, each unknown
    with its value and bounds; numbers, and the words ``simulate --calibrate`` prints."""
    cal = Calibration(
        targets=Targets(dict(calibration["targets"])),
        knobs=Knobs(**{k: float(v) for k, v in calibration["knobs"].items()}),
        achieved=dict(calibration["achieved"]), free=tuple(calibration["fitted"]),
        evaluations=calibration["evaluations"], wall_s=calibration["wall_s"],
        within=calibration["within_tolerance"], shown=dict(calibration.get("shown") or {}))
    targets = []
    for (name, value), row in zip(cal.targets.values.items(), cal.target_rows(), strict=True):
        targets.append({"name": name, "label": row[0], "target": value,
                        "simulated": cal.achieved.get(name), "residual": cal.residual(name),
                        "tolerance": calibration["tolerance"].get(name, TOLERANCE[name]), "met": cal.met(name),
                        "text": dict(zip(("target", "simulated", "residual", "tolerance"), row[1:5], strict=True))})
    unknowns = []
    for name, knob_row in zip(KNOBS, cal.knob_rows(), strict=True):
        low, high = calibration["bounds"].get(name, BOUNDS[name])
        unknowns.append({"name": name, "label": KNOB_TEXT[name], "value": getattr(cal.knobs, name), "low": low,
                         "high": high, "fitted": name in cal.free,
                         "text": {"value": knob_row[1], "bounds": f"{low:g} to {high:g}"}})
    # The observed run: a study's before, else the input's run (sim/calibrate.py, Subject.observed).
    scenarios = [r["scenario"] for r in runs]
    return {"observed": "before" if "before" in scenarios else scenarios[0], "withinTolerance": cal.within,
            "evaluations": cal.evaluations, "wallSeconds": cal.wall_s, "targets": targets, "unknowns": unknowns}
