"""How long the advisor and the calibration take, against one simulation of the same input, in one process.

* baseline: one simulation of the case study's given configuration (what every proposal the advisor judges
  costs), and one of its *before* run (what every step of the calibration costs);
* advise: ``gpufleet advise`` on the case study for each objective at the default budget of simulations, its
  time split into the integer program, the simulator and the rest, and its ratio to the baseline;
* calibrate: the case study calibrated to the guide's published before (``gpufleet demo``), its ratio to the
  baseline, and how many simulations the fit took.

The ratios say what a user waits for in units of "one simulation of my input"; the absolute seconds depend on
the machine and its load (printed with the load average).

    .venv/bin/python bench/advise.py [--evaluations 24] [--objectives balanced,wait,cost]
"""

from __future__ import annotations

import argparse
import os
import time

from gpufleet.advise.inputs import read_input
from gpufleet.advise.judge import run
from gpufleet.advise.search import DEFAULT_EVALUATIONS, given_proposal, prepare, scenario_of, search
from gpufleet.sim.calibrate import Knobs, fit, parse_targets, subject_for
from gpufleet.sim.scenario import run_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=DEFAULT_EVALUATIONS)
    parser.add_argument("--objectives", default="balanced,wait,cost")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    inp = read_input([])
    ctx = prepare(inp)
    started = time.perf_counter()
    run(scenario_of(ctx, given_proposal(ctx)), inp.policy, inp.seed)
    baseline = time.perf_counter() - started
    print(f"baseline: one simulation of the case study's given configuration {baseline:.2f} s")
    for objective in args.objectives.split(","):
        started = time.perf_counter()
        advice = search(read_input([]), objective, evaluations=args.evaluations)  # type: ignore[arg-type]
        wall = time.perf_counter() - started
        t = advice.timings
        print(f"advise --objective {objective}: {wall:.1f} s = {wall / baseline:.0f}x baseline; "
              f"{len(advice.tried)} proposals simulated in {t.get('simulate', 0):.1f} s, "
              f"{t.get('programs', 0):.0f} programs solved in {t.get('program', 0):.1f} s; "
              f"{'a proposal' if advice.changed else 'the given configuration'} chosen")
    subject = subject_for([])
    before = subject.observed_scenario(Knobs())
    started = time.perf_counter()
    run_scenario(before, before.policies[0], seed=subject.seed)
    before_s = time.perf_counter() - started
    started = time.perf_counter()
    cal = fit(subject, parse_targets("utilization=35,success=62"))
    wall = time.perf_counter() - started
    print(f"baseline: one simulation of the case study's before run {before_s:.2f} s")
    print(f"calibrate utilization=35,success=62: {wall:.1f} s = {wall / before_s:.0f}x baseline, "
          f"{cal.evaluations} simulations; load {cal.knobs.load_scale:.2f}, busy {cal.knobs.busy_scale:.2f}, "
          f"failure rate {cal.knobs.failure_rate:.2f}")


if __name__ == "__main__":
    main()
