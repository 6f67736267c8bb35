"""Per-job records: what became of every job of a run, the contract the yardsticks, the report and outside tools
read (``gpufleet simulate --jobs-out FILE`` writes them as JSON Lines, one line per job per run).

A line (:meth:`JobLine.to_json`)::

    {"policy", "scenario", "job": "ns/name", "class", "queue", "role", "gpus": f, "submitted": s,
     "outcome": "succeeded" | "failed" | "running" | "pending", "firstStart": s | null, "finished": s | null,
     "attempts": n, "failures": {"OOMKilled": n, ...}, "preemptions": n,
     "gpuSecondsHeld": f, "gpuSecondsUseful": f, "gpuSecondsBusyUseful": f, "costHeld": CHF}

* ``gpus``: the whole-GPU equivalents the job held when its pods were first placed (a MIG instance by its compute
  slices over the GPU's, a replica or a fraction by its share), else, never placed, the devices it asks;
* ``outcome`` at the end of the run: ``succeeded``; ``failed`` (for good, its retries spent); ``running`` (an
  attempt whose every pod runs, healthy, at the end); ``pending`` (waiting at the end: never started, or
  waiting again after a failure or a preemption; ``firstStart`` tells which);
* ``failures``: per cause, the attempts that failed, and the pods that failed alone while their job ran on (the
  ``replace_pods`` failure model: a replacement took their place; what they held is never useful);
* ``firstStart``: when the job's work first began (every pod of an attempt running); ``finished``: when it
  succeeded or failed for good;
* GPU-seconds are whole-GPU equivalents over the whole run (the window and its drain): a whole GPU counts 1,
  a MIG instance its compute slices over the GPU's (3/7 for a 3g.40gb), a time-slice replica or a fraction its
  share. *Held*: by every attempt, failed, preempted and waiting ones included; *useful*: by the attempt that
  succeeded, or by the running attempt so far. *Busy useful*: the compute that useful work kept busy (busy
  GPU equivalents while working), the same whatever device holds it, where *useful* grows with the device: a
  job on a whole GPU holds more than on a 3g.40gb for the same work. ``costHeld`` prices what it held (its share
  of each GPU at the model's price per GPU-hour).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpufleet.sim.records import JobRecord, PodSpan, SimResult

EndOutcome = Literal["succeeded", "failed", "running", "pending"]


@dataclass(frozen=True, slots=True)
class JobLine:
    policy: str
    scenario: str
    job: str
    klass: str | None
    queue: str
    role: str | None
    gpus: float
    submitted: float
    outcome: EndOutcome
    first_start: float | None
    finished: float | None
    attempts: int
    failures: dict[str, int]
    preemptions: int
    gpu_seconds_held: float
    gpu_seconds_useful: float
    gpu_seconds_busy_useful: float
    cost_held: float

    @property
    def started(self) -> bool:
        return self.first_start is not None

    def time_to_start(self, run_end: float) -> float:
        """From submission to the first start; a job that never started counts until ``run_end``."""
        stop = self.first_start if self.first_start is not None else run_end
        return max(0.0, stop - self.submitted)

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "scenario": self.scenario, "job": self.job, "class": self.klass,
                "queue": self.queue, "role": self.role, "gpus": round(self.gpus, 4),
                "submitted": round(self.submitted, 3),
                "outcome": self.outcome,
                "firstStart": None if self.first_start is None else round(self.first_start, 3),
                "finished": None if self.finished is None else round(self.finished, 3),
                "attempts": self.attempts, "failures": dict(sorted(self.failures.items())),
                "preemptions": self.preemptions, "gpuSecondsHeld": round(self.gpu_seconds_held, 3),
                "gpuSecondsUseful": round(self.gpu_seconds_useful, 3),
                "gpuSecondsBusyUseful": round(self.gpu_seconds_busy_useful, 3), "costHeld": round(self.cost_held, 4)}


def _end_outcome(record: JobRecord) -> EndOutcome:
    if record.outcome == "succeeded":
        return "succeeded"
    if record.outcome == "failed":
        return "failed"
    last = record.attempts[-1] if record.attempts else None
    if last is not None and last.outcome == "running" and last.ended is None:
        return "running"
    return "pending"


def _useful_attempts(record: JobRecord) -> set[int]:
    return {i for i, a in enumerate(record.attempts)
            if a.outcome == "succeeded" or (a.outcome == "running" and a.ended is None)}


def job_lines(result: SimResult) -> list[JobLine]:
    """One line per job of the run, in the order the run lists its jobs."""
    spans: dict[str, list[PodSpan]] = {}
    for x in result.spans:
        spans.setdefault(x.job, []).append(x)
    out: list[JobLine] = []
    for record in result.jobs:
        useful = _useful_attempts(record)
        mine = spans.get(record.key, [])
        held = use = busy = cost = 0.0
        for x in mine:
            seconds = max(0.0, min(x.held_to, result.run_end) - x.held_from)
            held += x.equivalents * seconds
            cost += x.share * x.price * seconds / 3600
            if x.attempt in useful and x.failed is None:  # (a pod that failed alone did no useful work)
                use += x.equivalents * seconds
                if x.work_s is not None:
                    busy += x.demand * x.work_s
                elif x.busy_from is not None and x.busy_to is not None:
                    busy += x.demand * max(0.0, min(x.busy_to, result.run_end) - x.busy_from)
        starts = [a.started for a in record.attempts if a.started is not None]
        first = min((x.attempt for x in mine), default=0)
        placed: dict[str, PodSpan] = {}  # the pods of the first attempt that placed any, not their replacements
        for x in mine:
            if x.attempt == first:
                placed.setdefault(x.pod, x)
        failures = Counter(a.cause or "Unknown" for a in record.attempts if a.outcome == "failed")
        failures.update(x.failed for x in mine if x.failed is not None)  # pods replaced while the job ran on
        out.append(JobLine(
            policy=result.policy, scenario=result.scenario, job=record.key, klass=record.klass, queue=record.queue,
            role=record.role, gpus=sum(x.equivalents for x in placed.values()) if placed else record.gpus,
            submitted=record.arrival, outcome=_end_outcome(record),
            first_start=min(starts) if starts else None,
            finished=record.ended if record.outcome in ("succeeded", "failed") else None,
            attempts=len(record.attempts), failures=dict(failures),
            preemptions=sum(1 for a in record.attempts if a.outcome == "preempted"),
            gpu_seconds_held=held, gpu_seconds_useful=use, gpu_seconds_busy_useful=busy, cost_held=cost))
    return out


def write_jsonl(path: Path, results: Iterable[SimResult]) -> int:
    """Every run's job lines into ``path`` (JSON Lines); how many lines were written."""
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for result in results:
            for line in job_lines(result):
                f.write(json.dumps(line.to_json(), separators=(",", ":")) + "\n")
                n += 1
    return n

