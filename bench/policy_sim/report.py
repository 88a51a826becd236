"""Run every policy on a scenario, tabulate token-weighted throughput ratios, and check the issue's targets.

overall = the token-weighted throughput ratio over a whole scenario (weights: no-speculation tokens
per step); a phase = one segment of the generator's timeline. Targets (issue 15, fixed before any
result): in every phase ours >= max(no-spec, static) - 2%; in every scenario ours >= TIDE-adaptive
- 1%; over all scenarios ours above TIDE-adaptive; in every scenario ours within 5% of the informed
oracle. The hindsight bound is an upper bound: any policy above it in any row is reported too (a bug).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.policy_sim.generator import TICK_S, Scenario
from bench.policy_sim.hindsight import bound_series
from bench.policy_sim.operator_driver import OperatorPolicy
from bench.policy_sim.references import NoSpec, Oracle, Static, Tide
from bench.policy_sim.world import Draft, RecallJob, World
from tide_operator.control.policy import PolicyParams

POLICIES = ("no-spec", "static", "tide-default", "tide-adaptive", "oracle", "ours")
COLUMNS = (*POLICIES, "bound")
OVERALL, ALL = "OVERALL", "ALL"


@dataclass(frozen=True)
class Row:
    scenario: str
    phase: str  # a segment's name, OVERALL, or (scenario ALL) the mean of the scenarios' OVERALL
    values: dict[str, float]


def _controllers(world: World, ours: PolicyParams | None) -> dict[str, object]:
    return {"no-spec": NoSpec(world), "static": Static(world), "tide-default": Tide(world, adaptive=False),
            "tide-adaptive": Tide(world, adaptive=True), "oracle": Oracle(world), "ours": OperatorPolicy(world, ours)}


def run_policy(world: World, controller: object) -> list[float]:
    out = []
    ticks_every = round(TICK_S / (world.times[1] - world.times[0])) if len(world.times) > 1 else 1
    for i, t in enumerate(world.times):
        if i % ticks_every == 0:
            controller.tick(float(t))  # type: ignore[attr-defined]
        controller.before_step(i)  # type: ignore[attr-defined]
        out.append(world.step(controller.dep, i))  # type: ignore[attr-defined]
    return out


def run_series(scenario: Scenario, ours: PolicyParams | None = None) -> tuple[World, dict[str, list[float]]]:
    """Every policy's and the bound's throughput ratio at every step (one world: paired noise)."""
    world = World(scenario)
    series = {name: run_policy(world, c) for name, c in _controllers(world, ours).items()}
    series["bound"] = bound_series(world)
    return world, series


def run_scenario(scenario: Scenario, ours: PolicyParams | None = None) -> list[Row]:
    world, series = run_series(scenario, ours)
    weights = np.array([world.weight(i) for i in range(len(world.times))])
    rows = []
    for segment in [*scenario.segments, None]:
        mask = np.ones(len(world.times), bool) if segment is None else (
            (world.times >= segment.start_s) & (world.times < segment.end_s))
        w = weights[mask]
        values = {name: float(np.dot(np.array(s)[mask], w) / w.sum()) for name, s in series.items()}
        rows.append(Row(scenario.name, OVERALL if segment is None else segment.name, values))
    return rows


def all_row(rows: list[Row]) -> Row:
    overall = [r for r in rows if r.phase == OVERALL]
    return Row(ALL, OVERALL, {c: float(np.mean([r.values[c] for r in overall])) for c in COLUMNS})


def check(rows: list[Row]) -> list[str]:
    """The targets missed (empty: all met); ``rows`` holds phases and OVERALL rows, the ALL row is made here."""
    missed = []
    for r in rows:
        v, ours = r.values, r.values["ours"]
        above = [p for p in POLICIES if v[p] > v["bound"] + 1e-9]
        if above:
            missed.append(f"{r.scenario}/{r.phase}: {', '.join(above)} above the hindsight bound {v['bound']:.3f}")
        if r.phase != OVERALL:
            floor = max(v["no-spec"], v["static"])
            if ours < floor * 0.98:
                missed.append(f"{r.scenario}/{r.phase}: ours {ours:.3f} < 0.98 x max(no-spec, static) {floor:.3f}")
            continue
        if ours < v["tide-adaptive"] * 0.99:
            missed.append(f"{r.scenario}: ours {ours:.3f} < 0.99 x TIDE-adaptive {v['tide-adaptive']:.3f}")
        if ours < v["oracle"] * 0.95:
            missed.append(f"{r.scenario}: ours {ours:.3f} < 0.95 x informed oracle {v['oracle']:.3f}")
    total = all_row(rows).values
    if total["ours"] <= total["tide-adaptive"]:
        missed.append(f"ALL: ours {total['ours']:.3f} not above TIDE-adaptive {total['tide-adaptive']:.3f}")
    return missed


def table(rows: list[Row], print_line: Callable[[str], None] = print) -> None:
    header = f"{'scenario':<22}{'phase':<15}" + "".join(f"{c:>14}" for c in COLUMNS)
    print_line(header + f"{'ours/oracle':>13}{'ours/bound':>12}")
    for r in [*rows, all_row(rows)]:
        v = r.values
        print_line(f"{r.scenario:<22}{r.phase:<15}" + "".join(f"{v[c]:>14.3f}" for c in COLUMNS)
                   + f"{v['ours'] / v['oracle']:>13.3f}{v['ours'] / v['bound']:>12.3f}")


# ---- the draft pool (issue 16) ----------------------------------------------------------------------
POOL_POLICIES = ("tide-adaptive", "ours-pool-off", "ours")
__all__ = ["Draft", "PoolRow", "RecallJob", "Row", "check", "check_pool", "run_pool_scenario", "run_scenario"]


@dataclass(frozen=True)
class PoolRow:
    scenario: str
    throughput: dict[str, float]  # token-weighted over the scenario, per policy
    gpu_hours: dict[str, float]  # training GPU-hours: trainer and evaluation Jobs


def run_pool_scenario(scenario: Scenario, ours: PolicyParams, pool_off: PolicyParams) -> PoolRow:
    """TIDE-adaptive (retrains on every shift), ours with the pool's recall off, and ours; one world."""
    world = World(scenario)
    weights = np.array([world.weight(i) for i in range(len(world.times))])
    controllers = {"tide-adaptive": Tide(world, adaptive=True), "ours-pool-off": OperatorPolicy(world, pool_off),
                   "ours": OperatorPolicy(world, ours)}
    throughput, hours = {}, {}
    for name, controller in controllers.items():
        series = np.array(run_policy(world, controller))
        throughput[name] = float(np.dot(series, weights) / weights.sum())
        hours[name] = controller.dep.training_gpu_s / 3600  # type: ignore[attr-defined]
    return PoolRow(scenario.name, throughput, hours)


def check_pool(rows: list[PoolRow]) -> list[str]:
    """Issue 16's targets over the family (fixed before any result): ours' mean throughput at least 5%
    above TIDE-adaptive's, and TIDE-adaptive's training GPU-hours at least twice ours."""
    mean = {p: float(np.mean([r.throughput[p] for r in rows])) for p in POOL_POLICIES}
    hours = {p: sum(r.gpu_hours[p] for r in rows) for p in POOL_POLICIES}
    missed = []
    if mean["ours"] < 1.05 * mean["tide-adaptive"]:
        missed.append(f"ours {mean['ours']:.3f} < 1.05 x TIDE-adaptive {mean['tide-adaptive']:.3f}")
    if hours["tide-adaptive"] < 2 * hours["ours"]:
        missed.append(f"training GPU-hours: TIDE-adaptive {hours['tide-adaptive']:.2f} < 2 x ours {hours['ours']:.2f}")
    return missed


def pool_table(rows: list[PoolRow], print_line: Callable[[str], None] = print) -> None:
    names = ("tide", "pool off", "pool on")
    print_line(f"{'scenario':<22}" + "".join(f"{n + ' thr':>13}" for n in names)
               + "".join(f"{n + ' GPU-h':>15}" for n in names) + f"{'on/tide':>9}{'on/off':>8}{'tide/on GPU-h':>15}")
    total = PoolRow("ALL (mean, sum)", {p: float(np.mean([r.throughput[p] for r in rows])) for p in POOL_POLICIES},
                    {p: sum(r.gpu_hours[p] for r in rows) for p in POOL_POLICIES})
    for r in [*rows, total]:
        t, h = r.throughput, r.gpu_hours
        print_line(f"{r.scenario:<22}" + "".join(f"{t[p]:>13.3f}" for p in POOL_POLICIES)
                   + "".join(f"{h[p]:>15.2f}" for p in POOL_POLICIES)
                   + f"{t['ours'] / t['tide-adaptive']:>9.3f}{t['ours'] / t['ours-pool-off']:>8.3f}"
                   + f"{h['tide-adaptive'] / max(h['ours'], 1e-9):>15.2f}")
