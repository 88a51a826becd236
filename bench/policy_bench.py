"""Policy benchmark: replay traffic scenarios through the control logic and the cost model.

    .venv/bin/python bench/policy_bench.py [--scenarios bench/scenarios/policy.yaml] [--minutes-scale 1.0]

Every policy sees the same world: the true acceptance of the served draft on the current domain,
the true batch size, costs 5% above the operator's profile, and Prometheus' view of it (values as
of the last scrape, acceptance averaged over the rate window, noise). Throughput is the modelled
speedup over no speculation, weighted by the no-speculation token rate at each batch size.

Policies: no speculation; a static draft (g=3, never retrained); TIDE-default (always on, g=3,
Algorithm 1 retraining, deploy when the eval improves); TIDE-adaptive (the same, speculating only
while the observed E[l] > c(b) g + beta(b)); this operator's policy (control.policy.decide); and an
oracle that sees the true acceptance and batch size, picks the best g (0 = off) at every step and
promotes every better draft the moment training ends, with the same collection and training time.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tide_operator.control import actions as act
from tide_operator.control.canary import PodGroupMetrics
from tide_operator.control.cost_model import (
    DEFAULT_PROFILE,
    expected_acceptance_length,
    tokens_for_batch_size,
)
from tide_operator.control.drift import DriftParams, DriftState, shift_detected, update_drift
from tide_operator.control.lifecycle import TrainingObservation, TrainingStatus
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide
from tide_operator.control.speculation import SpeculationState

DEFAULT_SCENARIOS = Path(__file__).parent / "scenarios" / "policy.yaml"
POLICIES = ("no-spec", "static", "tide-default", "tide-adaptive", "ours", "oracle", "ours-mpi30m")
# ours-mpi30m: a sensitivity check, not a target: this policy with canary.minPromotionInterval at
# 30 minutes (the default until the bench showed the second round of a shift waiting on it).
Draft = dict[str, float]  # domain -> per-token acceptance rate
History = tuple[float, float | None, float | None, float, float | None]  # t, length, canary length, b, a


@dataclass
class Phase:
    name: str
    domain: str
    start_s: float
    end_s: float
    batch: tuple[float, float]

    def batch_at(self, t: float) -> float:
        frac = (t - self.start_s) / (self.end_s - self.start_s)
        lo, hi = self.batch
        return math.exp(math.log(lo) + frac * (math.log(hi) - math.log(lo)))


@dataclass
class Config:
    raw: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    @property
    def g(self) -> int:
        return int(self.raw["serving"]["num_speculative_tokens"])


def true_speedup(a: float, g: int, b: float, cost_error: float) -> float:
    """The world's speedup: the profile's costs inflated by the configured model error."""
    if g == 0:
        return 1.0
    draft = DEFAULT_PROFILE.draft_cost(b) * (1 + cost_error)
    verify = 1 + (DEFAULT_PROFILE.verify_cost(b, g) - 1) * (1 + cost_error)
    return expected_acceptance_length(a, g) / (draft * g + verify)


def base_rate(b: float) -> float:
    """Tokens/s without speculation, up to a constant: b / T(b) with T(n) = 1 + n / 320."""
    return b / (1 + b / 320.0)


@dataclass
class World:
    """One policy's copy of the deployment: what it serves, captures and trains."""

    served: Draft
    version: int = 1  # v1: the template's initial draft
    enabled: bool = True
    fixed_g: int = 3
    table: tuple[tuple[int, int, int], ...] | None = None
    capture: bool = True
    buffer: dict[str, float] = field(default_factory=dict)  # samples since the last launch, per domain
    job: tuple[str, float, Draft, str] | None = None  # run_id, finishes_at, draft, domain
    finished: TrainingObservation | None = None
    candidates: dict[str, Draft] = field(default_factory=dict)
    canary: Draft | None = None
    canary_since: float = 0.0
    history: list[History] = field(default_factory=list)

    def g_at(self, b: float) -> int:
        if not self.enabled:
            return 0
        return tokens_for_batch_size(self.table, b) if self.table is not None else self.fixed_g


class Simulation:
    def __init__(self, cfg: Config, phases: list[Phase], rng: np.random.Generator) -> None:
        self.cfg, self.phases, self.rng = cfg, phases, rng
        self.ceiling = {d: v["ceiling"] for d, v in cfg["domains"].items()}
        self.static = {d: v["static"] for d, v in cfg["domains"].items()}
        self.cost_error = cfg["cost"]["true_cost_error"]

    def phase_at(self, t: float) -> Phase:
        return next(p for p in self.phases if p.start_s <= t < p.end_s)

    def trained(self, draft: Draft, buffer: dict[str, float]) -> Draft:
        """Each domain closes the gap to its ceiling in proportion to its share of the buffer."""
        gain, total = self.cfg["pipeline"]["training_gain"], sum(buffer.values()) or 1.0
        new = dict(draft)
        for domain, samples in buffer.items():
            new[domain] = draft[domain] + gain * samples / total * (self.ceiling[domain] - draft[domain])
        return new

    def step(self, world: World, t: float) -> float:
        """Advance one step; returns this step's throughput relative to no speculation."""
        phase = self.phase_at(t)
        b = phase.batch_at(t)
        g = world.g_at(b)
        a = world.served[phase.domain]
        control = true_speedup(a, g, b, self.cost_error)
        length = expected_acceptance_length(a, g) if g else None
        canary_length = None
        speedup = control
        if world.canary is not None:
            frac = self.cfg["serving"]["canary_replicas"] / self.cfg["serving"]["replicas"]
            cg = g or self.cfg.g  # canary pods speculate even while control pods do not
            ca = world.canary[phase.domain]
            canary_length = expected_acceptance_length(ca, cg)
            speedup = (1 - frac) * control + frac * true_speedup(ca, cg, b, self.cost_error)
        world.history.append((t, length, canary_length, b, a if g else None))
        if world.capture:
            self.capture(world, phase.domain)
        if world.job is not None and t >= world.job[1]:
            self.finish_job(world)
        return speedup

    def capture(self, world: World, domain: str) -> None:
        world.buffer[domain] = (
            world.buffer.get(domain, 0.0) + self.cfg["serving"]["capture_samples_per_s"] * self.cfg["step_s"]
        )

    def finish_job(self, world: World) -> None:
        assert world.job is not None
        run_id, _, draft, domain = world.job
        noise = self.cfg["pipeline"]["eval_noise"]
        cand = expected_acceptance_length(draft[domain], self.cfg.g) * (1 + self.rng.normal(0, noise))
        served = expected_acceptance_length(world.served[domain], self.cfg.g)
        world.candidates[run_id] = draft
        world.finished = TrainingObservation(run_id, TrainingStatus.SUCCEEDED, cand, served)
        world.job = None

    def launch(self, world: World, run_id: str, t: float) -> None:
        buffer = world.buffer
        domain = max(buffer, key=buffer.__getitem__) if buffer else self.phase_at(t).domain
        draft = self.trained(world.served, buffer)
        world.job = (
            run_id,
            t + self.cfg["pipeline"]["training_s"],
            draft,
            domain,
        )  # evaluated on its main domain
        world.buffer, world.finished = {}, None

    def observe(self, world: World, t: float) -> Observation:
        """Prometheus' view: as of the last scrape, acceptance over the rate window, with noise."""
        prom = self.cfg["prometheus"]
        seen_at = t - (t % prom["scrape_interval_s"])
        window = [h for h in world.history if seen_at - prom["rate_window_s"] < h[0] <= seen_at]
        if not window:
            return Observation(buffer_samples=int(sum(world.buffer.values())), promoted_version=f"v{world.version}")
        b_seen = window[-1][3] * max(0.05, 1 + self.rng.normal(0, prom["batch_noise"]))
        on = [(h[1], h[3]) for h in window if h[1] is not None]
        length, samples, first = None, 0, ()
        if on:
            noise = prom["acceptance_noise"]
            length = float(np.mean([x[0] for x in on])) * (1 + self.rng.normal(0, noise))
            rate = float(np.mean([h[4] for h in window if h[4] is not None])) * (1 + self.rng.normal(0, noise))
            first = (min(rate, 1.0),)
            step_tokens = prom["draft_tokens_per_s_per_seq"] * self.cfg["step_s"]
            samples = int(sum(x[1] for x in on) * step_tokens)
        canary = control = None
        if world.canary is not None:
            since = [h for h in window if h[0] >= world.canary_since]
            canary = self.group(since, 2)
            control = self.group(since, 1)
        return Observation(
            acceptance_length=length, per_position_acceptance=first, batch_size=b_seen,
            acceptance_samples=samples,
            buffer_samples=int(sum(world.buffer.values())), promoted_version=f"v{world.version}",
            training=world.finished, canary=canary, control=control,
        )  # fmt: skip

    def group(self, rows: list[History], col: int) -> PodGroupMetrics:
        values = [r[col] for r in rows if r[col] is not None]
        if not values:
            return PodGroupMetrics(None, None)
        noise = self.cfg["prometheus"]["acceptance_noise"]
        return PodGroupMetrics(float(np.mean(values)) * (1 + self.rng.normal(0, noise)), None)


class OursController:
    def __init__(self, sim: Simulation, cfg: Config, min_promotion_interval_s: float | None = None) -> None:
        self.sim = sim
        self.params = PolicyParams(
            target_revision="rev-1",
            num_speculative_tokens=cfg.g,
            max_batch_size=cfg["serving"]["max_batch_size"],
            observation_window_s=cfg["prometheus"]["rate_window_s"],  # the operator queries the world's window
        )
        if min_promotion_interval_s is not None:
            canary = replace(self.params.canary, min_promotion_interval_s=min_promotion_interval_s)
            self.params = replace(self.params, canary=canary)
        self.state = PolicyState(speculation=SpeculationState(enabled=True))  # what the pods start with

    def tick(self, world: World, t: float) -> None:
        actions, self.state = decide(self.sim.observe(world, t), self.state, self.params, t)
        for action in actions:
            self.apply(world, action, t)

    def apply(self, world: World, action: act.Action, t: float) -> None:
        if isinstance(action, act.SetSpeculation):
            world.enabled, world.table = action.enabled, action.tokens_per_batch_size
        elif isinstance(action, act.SetCapture):
            world.capture = action.enabled
        elif isinstance(action, act.LaunchTraining):
            self.sim.launch(world, action.run_id, t)
        elif isinstance(action, act.StartCanary):
            world.canary, world.canary_since = world.candidates[action.candidate], t
        elif isinstance(action, act.Promote):
            world.served, world.canary, world.version = (
                world.candidates[action.candidate],
                None,
                world.version + 1,
            )
        elif isinstance(action, act.RollBack):
            world.canary = None


class TideController:
    """TIDE as the paper describes it: Algorithm 1 retraining; SD always on or by E[l] > c g + beta."""

    def __init__(self, sim: Simulation, cfg: Config, adaptive: bool) -> None:
        self.sim, self.cfg, self.adaptive = sim, cfg, adaptive
        self.drift, self.drift_params = DriftState(), DriftParams()
        self.length: float | None = None  # last observed E[l]
        self.runs = 0

    def tick(self, world: World, t: float) -> None:
        obs = self.sim.observe(world, t)
        g = self.cfg.g
        if world.enabled and obs.acceptance_length is not None and obs.acceptance_samples > 0:
            self.length = obs.acceptance_length
            a = min(max((obs.acceptance_length - 1) / g, 0.0), 1.0)  # vLLM's accepted/drafted
            self.drift = update_drift(self.drift, a, obs.acceptance_samples, t, self.drift_params)
        if shift_detected(self.drift, self.drift_params):
            world.capture = True
        if world.finished is not None:
            self.deploy_if_better(world)
        if world.capture and world.job is None and sum(world.buffer.values()) >= 2048:
            self.runs += 1
            self.sim.launch(world, f"r{self.runs}", t)
        if self.adaptive and self.length is not None and obs.batch_size is not None:
            b = obs.batch_size
            world.enabled = self.length > DEFAULT_PROFILE.draft_cost(b) * g + DEFAULT_PROFILE.verify_cost(b, g)

    def deploy_if_better(self, world: World) -> None:
        report = world.finished
        assert report is not None
        assert report.candidate_acceptance_length is not None
        assert report.served_acceptance_length is not None
        if report.candidate_acceptance_length > report.served_acceptance_length:
            world.served, self.length = world.candidates[report.run_id], report.candidate_acceptance_length
            self.drift = DriftState()
        else:
            world.capture = False  # Algorithm 1: stop collecting until the next shift
        world.finished = None


class FixedController:
    def tick(self, world: World, t: float) -> None:
        return None


def run_oracle(sim: Simulation, cfg: Config, total_s: float) -> list[float]:
    """True acceptance and batch, best g per step; trains continuously and promotes instantly."""
    world = World(served=dict(sim.static))
    out = []
    runs = 0
    for t in np.arange(0, total_s, cfg["step_s"]):
        phase = sim.phase_at(t)
        b, a = phase.batch_at(t), world.served[phase.domain]
        out.append(max(true_speedup(a, g, b, sim.cost_error) for g in range(cfg.g + 1)))
        sim.capture(world, phase.domain)
        if world.job is not None and t >= world.job[1]:
            world.served, world.job = world.job[2], None
        if world.job is None and sum(world.buffer.values()) >= 2048:
            runs += 1
            sim.launch(world, f"r{runs}", t)
    return out


def run_policy(name: str, sim: Simulation, cfg: Config, total_s: float) -> list[float]:
    if name == "oracle":
        return run_oracle(sim, cfg, total_s)
    world = World(served=dict(sim.static), fixed_g=cfg.g, enabled=name != "no-spec", capture=name != "static")
    controller: Any = FixedController()
    if name.startswith("ours"):
        world.capture = False  # pods start as the template says (speculating); the policy decides capture
        controller = OursController(sim, cfg, 1800.0 if name == "ours-mpi30m" else None)
    elif name.startswith("tide"):
        controller = TideController(sim, cfg, adaptive=name == "tide-adaptive")
    out, next_tick = [], 0.0
    for t in np.arange(0, total_s, cfg["step_s"]):
        if t >= next_tick:
            controller.tick(world, float(t))
            next_tick += cfg["tick_s"]
        out.append(sim.step(world, float(t)))
    return out


def build_phases(rows: list[dict[str, Any]], scale: float) -> list[Phase]:
    phases, start = [], 0.0
    for row in rows:
        end = start + row["minutes"] * 60 * scale
        phases.append(Phase(row["name"], row["domain"], start, end, tuple(row["batch"])))  # type: ignore[arg-type]
        start = end
    return phases


def weighted(values: list[float], weights: list[float]) -> float:
    return float(np.dot(values, weights) / np.sum(weights))


def run_scenario(
    cfg: Config, name: str, rows: list[dict[str, Any]], scale: float, seed_offset: int = 0
) -> list[list[str | float]]:
    phases = build_phases(rows, scale)
    total = phases[-1].end_s
    times = np.arange(0, total, cfg["step_s"])
    rates = [base_rate(next(p for p in phases if p.start_s <= t < p.end_s).batch_at(t)) for t in times]
    results = {}
    for policy in POLICIES:
        rng = np.random.default_rng(cfg["seed"] + seed_offset)  # the same noise for every policy
        sim = Simulation(cfg, phases, rng)
        results[policy] = run_policy(policy, sim, cfg, total)
    table: list[list[str | float]] = []
    for phase in [*phases, None]:
        idx = [i for i, t in enumerate(times) if phase is None or phase.start_s <= t < phase.end_s]
        w = [rates[i] for i in idx]
        row: list[str | float] = [name, phase.name if phase else "OVERALL"]
        row += [weighted([results[p][i] for i in idx], w) for p in POLICIES]
        table.append(row)
    return table


def all_scenarios(rows: list[list[str | float]]) -> list[str | float]:
    """The ALL row: each policy's OVERALL averaged over the scenarios, every scenario weighing the same."""
    overall = [r for r in rows if r[1] == "OVERALL"]
    return ["ALL", "OVERALL", *(float(np.mean([float(r[i]) for r in overall])) for i in range(2, 2 + len(POLICIES)))]


def check_targets(rows: list[list[str | float]]) -> tuple[list[str], list[str]]:
    """The issue's targets, then stricter per-scenario comparisons (information, not targets).

    Targets: never more than 2% below the better of no speculation and static in any phase; beat
    TIDE-adaptive overall and come within 5% of the oracle (the ALL row).
    """
    col = {p: 2 + i for i, p in enumerate(POLICIES)}
    missed, stricter = [], []
    for row in rows:
        ours, floor = float(row[col["ours"]]), max(float(row[col["no-spec"]]), float(row[col["static"]]))
        if row[0] != "ALL" and ours < floor * 0.98:
            missed.append(f"{row[0]}/{row[1]}: ours {ours:.3f} < 0.98 x best(no-spec, static) {floor:.3f}")
        if row[1] != "OVERALL":
            continue
        notes = missed if row[0] == "ALL" else stricter
        if ours <= float(row[col["tide-adaptive"]]):
            notes.append(f"{row[0]}: ours {ours:.3f} does not beat TIDE-adaptive {row[col['tide-adaptive']]:.3f}")
        if ours < float(row[col["oracle"]]) * 0.95:
            notes.append(f"{row[0]}: ours {ours:.3f} more than 5% below the oracle {row[col['oracle']]:.3f}")
    return missed, stricter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=Path, default=DEFAULT_SCENARIOS)
    parser.add_argument("--minutes-scale", type=float, default=1.0, help="shorten every phase (tests)")
    parser.add_argument("--repeats", type=int, default=1, help="average over seeds seed, seed+1, ...")
    args = parser.parse_args(argv)
    cfg = Config(yaml.safe_load(args.scenarios.read_text()))
    rows = []
    for name, phases in cfg["scenarios"].items():
        runs = [run_scenario(cfg, name, phases, args.minutes_scale, k) for k in range(args.repeats)]
        rows += [r[:2] + list(np.mean([run[i][2:] for run in runs], axis=0)) for i, r in enumerate(runs[0])]
    header = f"{'scenario':<14}{'phase':<13}" + "".join(f"{p:>14}" for p in POLICIES)
    seeds = f"seed {cfg['seed']}" + (f" .. +{args.repeats - 1} (mean)" if args.repeats > 1 else "")
    print(f"throughput relative to no speculation (modelled; {seeds})")
    print(header)
    for row in rows:
        print(f"{row[0]:<14}{row[1]:<13}" + "".join(f"{float(v):>14.3f}" for v in row[2:]))
    rows.append(all_scenarios(rows))
    row = rows[-1]
    print(f"{row[0]:<14}{row[1]:<13}" + "".join(f"{float(v):>14.3f}" for v in row[2:]))
    missed, stricter = check_targets(rows)
    print("targets met" if not missed else "targets missed:\n  " + "\n  ".join(missed))
    if stricter:
        print("per scenario (stricter than the targets):\n  " + "\n  ".join(stricter))
    return 0


if __name__ == "__main__":
    sys.exit(main())
