"""``gpufleet simulate --calibrate``: fit the workload to what a team observed, then run every scenario on it.

The fit itself is :mod:`gpufleet.sim.calibrate`; here it is called with progress on standard error, and its
result is shown as a terminal table and as a report section."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.cli import console
from gpufleet.sim.calibrate import (
    Calibration,
    Knobs,
    calibrated_plan,
    fit,
    parse_targets,
    subject_for,
)
from gpufleet.sim.report import Section, TableBlock
from gpufleet.sim.runner import Plan, plan

GUIDE_BASELINE = "utilization=35,success=62"  # the guide's published "before" (casestudy.PUBLISHED_CLAIMS)


def calibrate(files: Sequence[str], targets: str, *, policy: str | None, compare: str | None, duration: str | None,
              seed: int | None, failures: str | None, strict: bool) -> tuple[Plan, Calibration]:
    """The plan of ``gpufleet simulate`` with its workload calibrated to ``targets``."""
    wanted = parse_targets(targets)
    uncalibrated = plan(files, policy=policy, compare=compare, duration=duration, seed=seed, failures=failures,
                        strict=strict)
    subject = subject_for(files, seed=seed, duration=duration, failures=failures, policy=policy, compare=compare,
                          strict=strict)
    console.note(f"calibrating {subject.what} to {wanted.text()}: each step is a simulation of it")

    def progress(n: int, knobs: Knobs, got: dict[str, float | None]) -> None:
        figures = ", ".join(f"{k} {'n/a' if v is None else f'{v:.1f}'}" for k, v in got.items())
        console.note(f"  simulation {n}: load {knobs.load_scale:.2f}, busy {knobs.busy_scale:.2f}, failure rate "
                     f"{knobs.failure_rate:.2f} -> {figures}")

    cal = fit(subject, wanted, progress=progress)
    return calibrated_plan(uncalibrated, subject, cal), cal


def tables(cal: Calibration) -> list[console.Table]:
    fit_table = console.make_table("Calibration: the observed run against what the team observed", "target",
                                   console.Column("observed", justify="right"),
                                   console.Column("simulated", justify="right"),
                                   console.Column("residual", justify="right"),
                                   console.Column("tolerance", justify="right"))
    for row in cal.target_rows():
        fit_table.add_row(*row)
    unknowns = console.make_table(f"The workload's unknowns ({cal.evaluations} simulations, {cal.wall_s:.0f} s)",
                               "unknown", console.Column("value", justify="right"), "bounds", "")
    for knob in cal.knob_rows():
        unknowns.add_row(*knob)
    return [fit_table, unknowns]


def section(cal: Calibration) -> Section:
    """The fit as a report section: targets, residuals, the unknowns and how they were found."""
    return Section("Calibration", [
        f"The workload was calibrated to {cal.targets.text()}: the observed run reproduces those figures within "
        f"their tolerance, and every run of this report uses the calibrated workload ({cal.evaluations} "
        f"simulations, {cal.wall_s:.0f} s).",
        TableBlock.of(["target", "observed", "simulated", "residual", "tolerance"],
                      [list(r) for r in cal.target_rows()]),
        TableBlock.of(["unknown", "value", "bounds", "how"], [list(r) for r in cal.knob_rows()], 1),
        "Load scale multiplies every class's arrival rate; busy scale every class's busy share (at most a whole "
        "GPU); the failure rate is the chance that an attempt fails on its own, whatever the scheduler does. With "
        "fewer targets than unknowns, the split is the smallest change to the workload as written.",
    ])
