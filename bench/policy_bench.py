"""Policy benchmark: every policy on generated scenarios, side by side, with the issue's targets.

    .venv/bin/python bench/policy_bench.py [--seeds train|held-out] [--family NAME ...] [--check]
    .venv/bin/python bench/policy_bench.py --pool [--seeds train|held-out] [--check]

Scenarios come from bench/policy_sim/generator.py (families x the named seed set); tune on `train`,
report and check on `held-out`. "ours" is the operator's own control pass (control_loop.control_pass)
driven through simulated effects and sensors (bench/policy_sim/operator_driver.py); the references,
the world and the hindsight bound are described in their modules. Ratios are throughput over no
speculation, token-weighted. --check exits 1 when a target of issue 15 is missed.

--pool runs the draft pool's family (generator.POOL_FAMILIES: A, B, A, B, ..., every period at least
three training rounds) through TIDE-adaptive, ours with spec.control.draftPool.recall off, and ours,
with training GPU-hours (trainer and evaluation Jobs) beside throughput; --check then exits 1 when
issue 16's targets are missed (report.check_pool).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench.policy_sim

from bench.policy_sim.generator import FAMILIES, POOL_FAMILIES, SEED_SETS, scenario_set
from bench.policy_sim.operator_driver import SPEC, operator_params
from bench.policy_sim.report import check, check_pool, pool_table, run_pool_scenario, run_scenario, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", choices=sorted(SEED_SETS), default="held-out")
    parser.add_argument("--family", action="append", choices=FAMILIES, help="only these families (repeatable)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--speculation", choices=("Adaptive", "On", "Off"), default=None,
                        help="spec.control.speculation for ours, per-batch-size K only when Adaptive "
                        "(On: always on at K=3, the broken policy of the check's test)")
    parser.add_argument("--pool", action="store_true", help="the draft pool's family, pool off vs on (issue 16)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.pool:
        return _pool(args.seeds, args.check, started)
    scenarios = [s for s in scenario_set(args.seeds) if not args.family or s.family in args.family]
    control = {"speculation": args.speculation, "adaptiveSpeculativeTokens": args.speculation == "Adaptive"}
    spec = {**SPEC, "control": control} if args.speculation else None
    ours = operator_params(spec)
    rows = [row for scenario in scenarios for row in run_scenario(scenario, ours)]
    print(f"throughput over no speculation, token-weighted ({args.seeds} seeds {SEED_SETS[args.seeds]})")
    table(rows)
    missed = check(rows)
    print("targets met" if not missed else f"targets missed ({len(missed)}):\n  " + "\n  ".join(missed))
    print(f"{len(scenarios)} scenarios in {time.monotonic() - started:.1f}s")
    return 1 if args.check and missed else 0


def _pool(seeds: str, check_targets: bool, started: float) -> int:
    off = operator_params({**SPEC, "control": {"draftPool": {"recall": False}}})
    rows = [run_pool_scenario(s, operator_params(), off) for s in scenario_set(seeds, POOL_FAMILIES)]
    print(f"draft pool family, throughput over no speculation and training GPU-hours "
          f"({seeds} seeds {SEED_SETS[seeds]})")
    pool_table(rows)
    missed = check_pool(rows)
    print("targets met" if not missed else f"targets missed ({len(missed)}):\n  " + "\n  ".join(missed))
    print(f"{len(rows)} scenarios in {time.monotonic() - started:.1f}s")
    return 1 if check_targets and missed else 0


if __name__ == "__main__":
    sys.exit(main())
