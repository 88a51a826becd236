"""Placement rows (all-inference, TIDE's fixed split, ours) per fleet, routing, scenario and phase; the check.

Every value is what the fleet serves over what it serves with every class serving without speculation
behind capacity-weighted routing (so a plain Service's loss shows in every column), token-weighted
over steps as the policy bench weighs them. Targets (issue 17, fixed before any result): the fixed
split reproduces TIDE's steady-state 1.071 (s = 1.15) and 1.210 (s = 1.30) on TIDE's fleet within 0.01;
in every scenario ours >= the better baseline overall; in every phase ours >= 0.97 x the better baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bench.placement_sim.fleet import SHAPES, FleetShape, FleetWorld, Series, run_fleet
from bench.policy_sim.generator import Scenario
from tide_operator.control.fleet import FleetInput, Routing, decide_fleet, fleet_rate
from tide_operator.control.policy import PolicyParams

PLACEMENTS = ("all-inference", "fixed split", "ours")
OVERALL = "OVERALL"
STEADY = {"steady-s1.15": 1.15, "steady-s1.30": 1.30}  # TIDE's ShareGPT and Science speedups
TIDE_STEADY = {"steady-s1.15": 1.071, "steady-s1.30": 1.210}  # 8 x 6.76 s / (8 x 6.76 + 4)


@dataclass(frozen=True)
class Row:
    shape: str
    routing: Routing
    scenario: str
    phase: str
    values: dict[str, float]

    @property
    def best_baseline(self) -> float:
        return max(self.values["all-inference"], self.values["fixed split"])


def steady_rows(shape: FleetShape, routing: Routing) -> list[Row]:
    """Converged traffic at a constant speedup: no Job is due, the lent replicas already serve."""
    rows = []
    for name, s in STEADY.items():
        ours = decide_fleet(FleetInput(shape.groups(s), shape.training.group(s), True, routing,
                                       job_running=False, seconds_to_job=None, lent=True))
        values = {"all-inference": shape.all_inference(routing), "fixed split": fleet_rate(shape.groups(s), routing),
                  "ours": ours.rate}
        rows.append(Row(shape.name, routing, name, OVERALL, {k: v / shape.reference for k, v in values.items()}))
    return rows


def _served(shape: FleetShape, routing: Routing, series: Series, i: int) -> float:
    s = float(series.speedup[i])
    groups = shape.groups(s)
    if series.lent_serving[i]:
        groups = (*groups, shape.training.group(s))
    return fleet_rate(groups, routing) / shape.reference


def scenario_rows(scenario: Scenario, params: PolicyParams, shapes: Sequence[FleetShape] = SHAPES,
                  routings: Sequence[Routing] = tuple(Routing), always_train: bool = False) -> list[Row]:
    """The operator's loop once for the fixed split (shared by every fleet), once per fleet and routing for ours
    (``always_train``: ours lends but never holds a run, the ablation of the training verdict)."""
    fixed_world = FleetWorld(scenario)
    fixed = run_fleet(fixed_world, params, None, Routing.WEIGHTED, lend_when_idle=False)
    weights = np.array([fixed_world.weight(i) for i in range(len(fixed_world.times))])
    rows = []
    for shape in shapes:
        for routing in routings:
            # Where the routing makes lending a loss, decide_fleet never lends: ours is the fixed split's run.
            ours = run_fleet(FleetWorld(scenario), params, shape, routing, lend_when_idle=True,
                             always_train=always_train) if shape.lending_pays(routing) else fixed
            per_step = {
                "all-inference": np.full(len(weights), shape.all_inference(routing) / shape.reference),
                "fixed split": np.array([_served(shape, routing, fixed, i) for i in range(len(weights))]),
                "ours": np.array([_served(shape, routing, ours, i) for i in range(len(weights))]),
            }
            for segment in [*scenario.segments, None]:
                mask = np.ones(len(weights), bool) if segment is None else (
                    (fixed_world.times >= segment.start_s) & (fixed_world.times < segment.end_s))
                w = weights[mask]
                values = {k: float(np.dot(v[mask], w) / w.sum()) for k, v in per_step.items()}
                rows.append(Row(shape.name, routing, scenario.name, OVERALL if segment is None else segment.name,
                                values))
    return rows


def check(rows: Sequence[Row]) -> list[str]:
    """The targets missed (empty: all met)."""
    missed = []
    for r in rows:
        v = r.values
        where = f"{r.shape}/{r.routing.value}/{r.scenario}/{r.phase}"
        if r.scenario in TIDE_STEADY and r.shape == SHAPES[0].name and r.routing is Routing.WEIGHTED and (
                abs(v["fixed split"] - TIDE_STEADY[r.scenario]) > 0.01):
            missed.append(f"{where}: fixed split {v['fixed split']:.3f}, TIDE's {TIDE_STEADY[r.scenario]:.3f}")
        if r.phase == OVERALL and v["ours"] < r.best_baseline - 1e-9:
            missed.append(f"{where}: ours {v['ours']:.3f} < the better baseline {r.best_baseline:.3f}")
        elif v["ours"] < 0.97 * r.best_baseline:
            missed.append(f"{where}: ours {v['ours']:.3f} < 0.97 x the better baseline {r.best_baseline:.3f}")
    return missed


def table(rows: Sequence[Row], print_line: Callable[[str], None] = print) -> None:
    print_line(f"{'fleet':<25}{'routing':<10}{'scenario':<24}{'phase':<15}"
               + "".join(f"{p:>15}" for p in PLACEMENTS) + f"{'ours/best':>11}")
    for r in rows:
        print_line(f"{r.shape:<25}{r.routing.value:<10}{r.scenario:<24}{r.phase:<15}"
                   + "".join(f"{r.values[p]:>15.3f}" for p in PLACEMENTS)
                   + f"{r.values['ours'] / r.best_baseline:>11.3f}")
