"""Fleets, lent replicas and the operator's loop on a fleet: what each placement serves, step by step.

A fleet shape is GPUs per class with TIDE's ratios (the catalog's: H100 6.76x an MI250 for inference and
2.44x for training, MI300X 4.42x and 1.77x). Every placement runs the same serving and training control
(the operator's, bench/policy_sim/operator_driver.py) and differs only in where it serves:
- all-inference: every class serves, speculation off (the reference TIDE compares with);
- TIDE's fixed split: the serving classes serve with the operator's speculation, the training class
  only trains (idle between Jobs);
- ours: the same, plus the training class lent to serving whenever control/fleet.decide_fleet says so,
  drained (the whole bound, serving nothing meanwhile) before a Job, and back after a start-up delay.
A Job launched while the lent replicas still serve waits for their drain: the world's Job finishes that
much later, so the operator's loop sees the delay (its promotions come later).
Every class speculates alike (the same draft and cost profile): s_c is the serving pods' speedup.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from bench.policy_sim import prometheus as prom
from bench.policy_sim.operator_driver import OperatorPolicy, pooled
from bench.policy_sim.world import Deployment, World
from tide_operator.catalog import DEFAULT_CATALOG
from tide_operator.control.cost_model import best_speculative_tokens
from tide_operator.control.fleet import ClassGroup, FleetInput, LendTiming, Routing, decide_fleet, fleet_rate
from tide_operator.control.fleet_training import LoadRegime, VerdictInput, training_verdict
from tide_operator.control.lifecycle_training import seconds_to_job
from tide_operator.control.policy import PolicyParams, PolicyState, lifecycle_params


@dataclass(frozen=True)
class ClassShare:
    gpu_class: str  # a catalog class name
    gpus: int
    gpus_per_replica: int

    def group(self, speedup: float = 1.0) -> ClassGroup:
        c = DEFAULT_CATALOG.get(self.gpu_class)
        return ClassGroup(self.gpu_class, self.gpus // self.gpus_per_replica, self.gpus_per_replica,
                          c.inference_throughput, speedup)


@dataclass(frozen=True)
class FleetShape:
    name: str
    serving: tuple[ClassShare, ...]
    training: ClassShare

    def groups(self, speedup: float) -> tuple[ClassGroup, ...]:
        return tuple(share.group(speedup) for share in self.serving)

    def all_inference(self, routing: Routing) -> float:
        """Every class serves without speculation."""
        return fleet_rate((*self.groups(1.0), self.training.group(1.0)), routing)

    def lending_pays(self, routing: Routing) -> bool:
        """The training class adds to what the fleet serves (every class at one speedup: it cancels out)."""
        with_lent = fleet_rate((*self.groups(1.0), self.training.group(1.0)), routing)
        return with_lent > fleet_rate(self.groups(1.0), routing)

    @property
    def reference(self) -> float:
        """What every placement is divided by: all-inference with capacity-weighted routing."""
        return self.all_inference(Routing.WEIGHTED)


SHAPES = (
    # TIDE §V-F: one 8xH100 node (TP=4 per instance) and one 4xMI250 node that trains.
    FleetShape("8xH100+4xMI250", (ClassShare("H100", 8, 4),), ClassShare("MI250", 4, 4)),
    # Ours: two vendors serve (NVIDIA and AMD nodes), the oldest class trains.
    FleetShape("8xH100+8xMI300X+8xMI250", (ClassShare("H100", 8, 4), ClassShare("MI300X", 8, 4)),
               ClassShare("MI250", 8, 4)),
)
TIMING = LendTiming()


class Lender:
    """The training class's lent replicas: kept -> starting -> serving -> draining -> kept."""

    def __init__(self, timing: LendTiming, serving: bool = False) -> None:
        self.timing = timing
        self.state, self.since = ("serving" if serving else "kept"), 0.0

    def decide(self, lend: bool, t: float) -> None:
        if lend and self.state == "kept":
            self.state, self.since = "starting", t
        elif not lend and self.state == "starting":
            self.state = "kept"  # a replica that never got Ready holds no request: deleted at once
        elif not lend and self.state == "serving":
            self.state, self.since = "draining", t

    def advance(self, t: float) -> None:
        if self.state == "starting" and t >= self.since + self.timing.startup_s:
            self.state = "serving"
        elif self.state == "draining" and t >= self.since + self.timing.drain_s:
            self.state = "kept"

    @property
    def lent(self) -> bool:
        return self.state in ("starting", "serving")

    def reclaim(self, t: float) -> float:
        """A Job needs the class now: seconds until it is free."""
        self.decide(False, t)
        return max(0.0, self.since + self.timing.drain_s - t) if self.state == "draining" else 0.0


class FleetWorld(World):
    """The policy bench's world where a Job first waits for the training class to be drained."""

    lender: Lender | None = None

    def _delayed(self, dep: Deployment, t: float) -> None:
        wait = self.lender.reclaim(t) if self.lender is not None else 0.0
        if wait and dep.job is not None:
            dep.job = replace(dep.job, finishes_at=dep.job.finishes_at + wait)

    def launch_training(self, dep: Deployment, run_id: str, t: float, captured_since: float | None = None,
                        min_samples: int = 0) -> None:
        super().launch_training(dep, run_id, t, captured_since, min_samples)
        self._delayed(dep, t)

    def launch_recall(self, dep: Deployment, run_id: str, t: float, versions: tuple[str, ...],
                      captured_since: float | None, min_samples: int) -> None:
        super().launch_recall(dep, run_id, t, versions, captured_since, min_samples)
        self._delayed(dep, t)


def job_due_in(policy: OperatorPolicy, params: PolicyParams, t: float) -> float | None:
    """lifecycle_training.seconds_to_job on the operator's state, at the world's capture rate (production
    measures it from the pods' capture counter)."""
    if policy.dep.job is not None:
        return None
    return seconds_to_job(_state(policy).lifecycle, lifecycle_params(params), int(policy.dep.samples_since_launch),
                          pooled(policy.effects.pool, policy.dep.pointer.name), t,
                          policy.world.params.capture_samples_per_s if policy.dep.capture else 0.0,
                          training_deferred=policy.training_deferred is not None)


@dataclass
class Series:
    """Per step: the serving pods' speedup, and whether the training class served (lent)."""

    speedup: np.ndarray
    lent_serving: np.ndarray
    job: np.ndarray  # a trainer or evaluation Job held the training class


CANARY_S = 120.0  # a run's evaluation and canary until its draft serves every pod (the e2e's: about two minutes)


class FleetTrainer:
    """The fleet's training verdict on the operator's state, once per pass: the load regime it tracks from
    Prometheus' batch size and the best acceptance promoted, the run's usual length (the world's)."""

    def __init__(self, policy: OperatorPolicy, shape: FleetShape, routing: Routing, always_train: bool = False,
                 timing: LendTiming = TIMING) -> None:
        self.policy, self.shape, self.routing, self.always_train = policy, shape, routing, always_train
        self.timing = timing
        self.regime: LoadRegime | None = None
        self.launched: tuple[str, float] | None = None  # the Job seen running and since when

    def verdict(self, t: float) -> str | None:
        """None: train as the lifecycle decides; else why training waits."""
        policy, params = self.policy, self.policy.params
        state = _state(policy)
        batch = prom.view(policy.world, policy.dep, t).batch_size
        job = policy.dep.job
        if job is not None and (self.launched is None or self.launched[0] != job.run_id):
            self.launched = (job.run_id, t)
        running_since = self.launched[1] if job is not None and self.launched is not None else None

        def speedup(a: float) -> float:
            return best_speculative_tokens(a, batch or 1.0, params.num_speculative_tokens, params.profile)[1]

        reading = VerdictInput(t, batch, state.acceptance_estimate, state.lifecycle.promoted_acceptance,
                               fleet_rate(self.shape.groups(1.0), self.routing),
                               fleet_rate((self.shape.training.group(1.0),), self.routing),
                               policy.world.params.training_s + CANARY_S, running_since,
                               startup_s=self.timing.startup_s)
        self.regime, held = training_verdict(self.regime, reading, speedup)
        if self.always_train or not self.shape.lending_pays(self.routing):
            return None
        return held


def run_fleet(world: World, params: PolicyParams, shape: FleetShape | None, routing: Routing,
              lend_when_idle: bool, timing: LendTiming = TIMING, always_train: bool = False) -> Series:
    """The operator's loop on ``world``; with ``lend_when_idle`` its fleet decisions tick beside it: before
    each pass whether a training run pays (the verdict the pass reads; ``always_train``: never held, TIDE's
    rule with lending), after it whether to lend."""
    policy = OperatorPolicy(world, params)
    lender = Lender(timing)
    if isinstance(world, FleetWorld):
        world.lender = lender if lend_when_idle else None
    trainer = (FleetTrainer(policy, shape, routing, always_train, timing) if shape is not None and lend_when_idle
               else None)
    ticks_every = round(30.0 / (world.times[1] - world.times[0])) if len(world.times) > 1 else 1
    n = len(world.times)
    speedup, lent, job = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
    last = 1.0
    for i, t in enumerate(world.times):
        if i % ticks_every == 0:
            if trainer is not None:
                policy.training_deferred = trainer.verdict(float(t))
            policy.tick(float(t))
            if trainer is not None:
                decision = decide_fleet(FleetInput(
                    trainer.shape.groups(last), trainer.shape.training.group(last), True, routing,
                    policy.dep.job is not None, job_due_in(policy, params, float(t)), timing, lender.lent))
                lender.decide(decision.lend, float(t))
        lender.advance(float(t))
        job[i] = policy.dep.job is not None
        lent[i] = lender.state == "serving"
        speedup[i] = last = world.step(policy.dep, i)
    return Series(speedup, lent, job)


def _state(policy: OperatorPolicy) -> PolicyState:
    stored = policy.draft.status.control_state
    return PolicyState.from_dict(stored) if stored else PolicyState()
