"""The fleet split (issue 17): per GPU class, serve with speculation, serve without, or train.

TIDE fixes the split: the fastest class serves with speculation and the best training class trains,
always (tide-paper.md §9). With N_c GPUs of class c, r_c its inference throughput (catalog, MI250 = 1)
and s the speculative speedup, in steady state, over every class serving without speculation:

    TIDE's fixed split   N_i r_i s / (N_i r_i + N_t r_t)      8xH100 + 4xMI250: 1.071 (s = 1.15), 1.210 (1.30)
    this operator        sum_c N_c r_c s_c / sum_c N_c r_c     while no trainer Job needs the training class

The training class trains only while a Job needs it. The rest of the time it is lent to serving, and
it is reclaimed (drained: readiness off, in-flight requests finish, bounded) before a Job starts, early
enough that the Job does not wait when the time to it is known. Lending pays only when it raises what
the fleet serves:
- routing: with capacity-weighted routing (an HTTPRoute with per-class weights) the classes' throughputs
  add up; a plain Service gives every pod the same request rate, so the fleet serves at most pods x the
  slowest pod's rate, and a slow lent pod can lower the total;
- time: lent replicas serve only after they start (model load), so lending for a window shorter than
  start plus drain gains nothing and delays the Job.
Each class speculates where its own cost profile says it pays (s_c > 1: the speculation decision).

While the training class can be lent, training is a choice too (control/fleet_training.py): a run
waits while the GPUs it would hold serve more than its draft would add before the load changes.
Pure: the caller measures speedups and estimates the time to the next Job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    SPECULATE = "ServeSpeculative"
    PLAIN = "ServePlain"
    TRAIN = "Train"  # the training class kept for trainer Jobs (running one or idle)


class Routing(StrEnum):
    WEIGHTED = "Weighted"  # per-class weights proportional to capacity (Gateway API HTTPRoute)
    EVEN = "Even"  # a plain Service: the same request rate per pod


class LendReason(StrEnum):
    LENT = "Lent"
    JOB_RUNNING = "TrainingJobRunning"
    JOB_DUE = "TrainingJobDue"  # due within the drain bound: drain now so the Job does not wait
    JOB_SOON = "TrainingJobSoon"  # lent replicas would be drained before they served long
    NOT_ENABLED = "LendingNotEnabled"
    NOTHING_TO_LEND = "NothingToLend"  # no training class, or its share holds no serving replica
    DOES_NOT_PAY = "LendingDoesNotPay"  # the routing makes the lent pods lower what the fleet serves


@dataclass(frozen=True)
class ClassGroup:
    """One GPU class's serving group as the split sees it."""

    name: str
    replicas: int
    gpus_per_replica: int
    inference_throughput: float  # per GPU, the catalog's
    speedup: float = 1.0  # what speculation gives this group now: 1.0 while it is off (the speculation decision's)

    @property
    def role(self) -> Role:
        return Role.SPECULATE if self.speedup > 1.0 else Role.PLAIN

    @property
    def replica_rate(self) -> float:
        """What one replica serves at its speedup."""
        return self.gpus_per_replica * self.inference_throughput * self.speedup


def fleet_rate(groups: Sequence[ClassGroup], routing: Routing) -> float:
    """What the serving groups serve together, in MI250-without-speculation units."""
    serving = [g for g in groups if g.replicas > 0]
    if not serving:
        return 0.0
    if routing is Routing.WEIGHTED:
        return sum(g.replicas * g.replica_rate for g in serving)
    return sum(g.replicas for g in serving) * min(g.replica_rate for g in serving)


ROUTE_WEIGHT_SCALE = 100  # an HTTPRoute weight per MI250-without-speculation unit (integers up to 1,000,000)


def capacity_weights(groups: Sequence[ClassGroup]) -> dict[str, int]:
    """Each class's share of the requests under weighted routing: what its replicas serve now, so every
    pod runs at the same fraction of its capacity. Groups of one class (lent beside serving) add up."""
    weights: dict[str, int] = {}
    for g in groups:
        weights[g.name] = weights.get(g.name, 0) + round(ROUTE_WEIGHT_SCALE * g.replicas * g.replica_rate)
    return weights


@dataclass(frozen=True)
class LendTiming:
    startup_s: float = 240.0  # a lent replica from scheduling to Ready (model load, warm-up)
    drain_s: float = 60.0  # the drain bound: in-flight requests get this long to finish


@dataclass(frozen=True)
class FleetInput:
    serving: tuple[ClassGroup, ...]  # the inference classes' groups
    lendable: ClassGroup | None  # the training class as a serving group of what it could lend (None: none)
    lend_when_idle: bool
    routing: Routing
    job_running: bool
    seconds_to_job: float | None  # until the next trainer or evaluation Job is due (None: none foreseen)
    timing: LendTiming = LendTiming()
    lent: bool = False  # lent replicas exist now (starting or serving)


@dataclass(frozen=True)
class FleetDecision:
    roles: dict[str, Role]
    lend: bool  # the training class serves (False while lent replicas exist: drain them)
    reason: LendReason
    rate: float  # what the fleet serves under this decision, modelled
    message: str


def decide_fleet(inp: FleetInput) -> FleetDecision:
    roles = {g.name: g.role for g in inp.serving}
    reason = _lend_reason(inp)
    lend = reason is LendReason.LENT
    groups = (*inp.serving, inp.lendable) if lend and inp.lendable is not None else inp.serving
    if inp.lendable is not None:
        roles[inp.lendable.name] = inp.lendable.role if lend else Role.TRAIN
    rate = fleet_rate(groups, inp.routing)
    return FleetDecision(roles, lend, reason, rate, _message(inp, reason, rate))


def _lend_reason(inp: FleetInput) -> LendReason:
    if not inp.lend_when_idle or inp.lendable is None or inp.job_running:
        return (LendReason.NOT_ENABLED if not inp.lend_when_idle
                else LendReason.NOTHING_TO_LEND if inp.lendable is None else LendReason.JOB_RUNNING)
    due = inp.seconds_to_job
    if due is not None and due <= inp.timing.drain_s:
        return LendReason.JOB_DUE
    if fleet_rate((*inp.serving, inp.lendable), inp.routing) <= fleet_rate(inp.serving, inp.routing):
        return LendReason.DOES_NOT_PAY
    # Already lent: keep serving until the drain is due. Not yet: only for a window worth a start.
    if not inp.lent and due is not None and due <= inp.timing.startup_s + inp.timing.drain_s:
        return LendReason.JOB_SOON
    return LendReason.LENT


def _message(inp: FleetInput, reason: LendReason, rate: float) -> str:
    if inp.lendable is None:
        return (f"nothing to lend: no training class, or one trainer Job's GPUs hold no serving replica "
                f"(an image for its vendor, and the serving pool whole first); fleet serves {rate:.2f}")
    name = inp.lendable.name
    return {
        LendReason.LENT: f"{name} lent to serving ({inp.lendable.replicas} replicas); fleet serves {rate:.2f}",
        LendReason.JOB_RUNNING: f"{name} trains: a Job runs",
        LendReason.JOB_DUE: f"{name} drained for the Job due in {inp.seconds_to_job or 0:.0f}s",
        LendReason.JOB_SOON: (f"{name} kept for the Job due in {inp.seconds_to_job or 0:.0f}s "
                              f"(a lent replica needs {inp.timing.startup_s + inp.timing.drain_s:.0f}s to pay)"),
        LendReason.NOT_ENABLED: f"{name} kept for training (training.lendWhenIdle is off)",
        LendReason.DOES_NOT_PAY: (f"{name} kept: with {inp.routing.value} routing its replicas would lower "
                                  f"what the fleet serves ({rate:.2f})"),
    }[reason]
