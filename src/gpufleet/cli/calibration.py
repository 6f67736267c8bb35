"""``gpufleet simulate --calibrate``: fit the workload to what a team observed, then run every scenario on it.

The fit itself is :mod:`gpufleet.sim.calibrate`; here it is called with progress on standard error, and its
result is shown as a terminal table and as a report section."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.cli import console
from gpufleet.sim.calibrate import (
    REPLICATIONS,
    Calibration,
    Knobs,
    calibrated_plan,
    fit,
    parse_targets,
    subject_for,
)
from gpufleet.sim.report.build import Section, TableBlock
from gpufleet.sim.runner import Plan, plan

# The guide's published "before" (casestudy.PUBLISHED_CLAIMS): 35% utilization, and a 62% success rate that the
# guide gives for its training jobs ("without gang scheduling 20-40% of training jobs fail"), attributed as the guide
# attributes it: "gang scheduling eliminates 90% of distributed-training failures".
GUIDE_BASELINE = "utilization=35,training_success=62"
GUIDE_ATTRIBUTION = "gang=0.9"


def calibrate(files: Sequence[str], targets: str, *, policy: str | None, compare: str | None, duration: str | None,
              seed: int | None, failures: str | None, strict: bool,
              attribute: str | None = None) -> tuple[Plan, Calibration]:
    """The plan of ``gpufleet simulate`` with its workload calibrated to ``targets`` (and ``attribute``: what the
    team says of its failures)."""
    wanted = parse_targets(targets).with_attribution(attribute)
    uncalibrated = plan(files, policy=policy, compare=compare, duration=duration, seed=seed, failures=failures,
                        strict=strict)
    subject = subject_for(files, seed=seed, duration=duration, failures=failures, policy=policy, compare=compare,
                          strict=strict)
    said = f" with failures attributed {wanted.attribution_text()}" if wanted.attribution_text() else ""
    console.note(f"calibrating {subject.what} to {wanted.text()}{said}: each step is a simulation of it")

    def progress(n: int, knobs: Knobs, got: dict[str, float | None]) -> None:
        figures = ", ".join(f"{k} {'n/a' if v is None else f'{v:.1f}'}" for k, v in got.items())
        console.note(f"  simulation {n}: load {knobs.load_scale:.2f}, busy {knobs.busy_scale:.2f}, gangs "
                     f"{knobs.gang_share:.2f}, timeout {knobs.rendezvous_timeout_s / 60:.0f} min, memory "
                     f"{knobs.memory_scale:.2f}, failure rate {knobs.failure_rate:.2f} -> {figures}")

    cal = fit(subject, wanted, progress=progress)
    return calibrated_plan(uncalibrated, subject, cal), cal


def tables(cal: Calibration) -> list[console.Table]:
    fit_table = console.make_table("Calibration: the observed run against what the team observed", "target",
                                   console.Column("observed", justify="right"),
                                   console.Column(f"simulated (mean of {REPLICATIONS})", justify="right"),
                                   console.Column("residual", justify="right"),
                                   console.Column("tolerance", justify="right"),
                                   console.Column("run shown", justify="right"))
    for row in cal.target_rows():
        fit_table.add_row(*row)
    unknowns = console.make_table(f"The workload's unknowns ({cal.evaluations} points of {REPLICATIONS} simulations, "
                                  f"{cal.wall_s:.0f} s)",
                               "unknown", console.Column("value", justify="right"), "bounds", "")
    for knob in cal.knob_rows():
        unknowns.add_row(*knob)
    return [fit_table, unknowns]


def split_line(cal: Calibration, scenario: str) -> str:
    """The mechanism split of the observed run's failures, in one line."""
    return f"Of {scenario}'s failed attempts: {cal.split_text()}."


def section(cal: Calibration) -> Section:
    """The fit as a report section: targets, residuals, the unknowns and how they were found."""
    return Section("Calibration", [
        f"The workload was calibrated to {cal.targets.text()}: the observed run reproduces those figures within "
        f"their tolerance, and every run of this report uses the calibrated workload ({cal.evaluations} "
        f"simulations, {cal.wall_s:.0f} s).",
        TableBlock.of(["target", "observed", f"simulated (mean of {REPLICATIONS})", "residual", "tolerance",
                       "run shown"], [list(r) for r in cal.target_rows()]),
        f"Each point of the fit is the mean of {REPLICATIONS} runs of the observed scenario with different scheduler "
        f"seeds (the jobs are the same); the runs of this report use seed {cal.seed}, the replication nearest the "
        "targets, whose own figures are in the last column.",
        TableBlock.of(["unknown", "value", "bounds", "how"], [list(r) for r in cal.knob_rows()], 1),
        f"Of the observed run's failed attempts at the fitted workload: {cal.split_text()}.",
        "Load scale multiplies every class's arrival rate; busy scale every class's busy share (at most a whole "
        "GPU); the gang share is the share of one-pod training jobs run distributed (two pods, the same work in "
        "half the time); the rendezvous timeout is how long a partial gang holds its GPUs before it fails; memory "
        "scale multiplies every class's GPU memory use; the failure rate is the chance that an attempt fails on "
        "its own, whatever the scheduler does. The scheduler-attributable mechanisms are fitted first; the failure "
        "rate only when they cannot meet the targets, for what they leave. With fewer targets than unknowns, the "
        "split is the smallest change to the workload as written.",
    ])
