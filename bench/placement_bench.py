"""Placement benchmark (issue 17): all-inference, TIDE's fixed split and the operator's split, side by side.

    .venv/bin/python bench/placement_bench.py [--seeds train|held-out] [--family NAME ...] [--phases] [--check]
                                              [--always-train]

Fleets: TIDE's 8xH100 + 4xMI250 and a two-vendor 8xH100 + 8xMI300X + 8xMI250 (bench/placement_sim/
fleet.py), each behind capacity-weighted routing and behind a plain Service. Scenarios: converged
traffic at TIDE's speedups (s = 1.15, 1.30) and the policy benchmark's generated scenarios, run through
the operator's own control loop. --check exits 1 when a target of issue 17 is missed
(bench/placement_sim/report.py); --phases prints every phase, not only each scenario's OVERALL row;
--always-train runs ours without the training verdict (control/fleet_training.py): lending, but every
run the lifecycle wants, as TIDE trains.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench.*

from bench.placement_sim.fleet import SHAPES
from bench.placement_sim.report import OVERALL, check, scenario_rows, steady_rows, table
from bench.policy_sim.generator import FAMILIES, SEED_SETS, scenario_set
from bench.policy_sim.operator_driver import operator_params
from tide_operator.control.fleet import Routing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", choices=sorted(SEED_SETS), default="held-out")
    parser.add_argument("--family", action="append", choices=FAMILIES, help="only these families (repeatable)")
    parser.add_argument("--phases", action="store_true", help="print every phase's row")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--always-train", action="store_true", help="ours never holds a training run (ablation)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = [row for shape in SHAPES for routing in Routing for row in steady_rows(shape, routing)]
    params = operator_params()
    for scenario in scenario_set(args.seeds):
        if not args.family or scenario.family in args.family:
            rows += scenario_rows(scenario, params, always_train=args.always_train)
    ours = "ours without the training verdict" if args.always_train else "ours"
    print(f"fleet throughput over all-inference without speculation behind capacity-weighted routing; {ours} "
          f"({args.seeds} seeds {SEED_SETS[args.seeds]})")
    table([r for r in rows if args.phases or r.phase == OVERALL])
    missed = check(rows)
    print("targets met" if not missed else f"targets missed ({len(missed)}):\n  " + "\n  ".join(missed))
    print(f"{len(rows)} rows in {time.monotonic() - started:.1f}s")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
