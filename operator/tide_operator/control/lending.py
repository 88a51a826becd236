"""Lent replicas on the training class (issue 17, training.lendWhenIdle): start, keep, drain.

The fleet split (control/fleet.py) says whether the training class serves now. This module turns
that verdict into what the lent pods get, pass by pass:
- lending: the lent Deployment runs ``replicas``; each lent pod goes into service (its readiness gate
  set True) once its containers are ready, so a pod that is still loading never takes a request;
- reclaiming: every lent pod leaves service (gate False: endpoints and the test client's pod list
  drop it), then the pods are deleted once each reports no request in flight, with the gate seen
  False by at least one earlier pass (a request routed before the endpoint update still arrives),
  or when the drain bound runs out. Training holds until the last lent pod is gone, so a trainer
  Job never waits Pending behind a replica that serves.
Pure: the caller reads the pods (readiness, gate, requests in flight from their /metrics) and carries
``draining_since`` between passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

SERVING_GATE = "tide.dev/serving"  # the lent pods' readiness gate: in service while True


class LendState(StrEnum):
    IDLE = "Idle"  # nothing lent
    LENT = "Lent"  # lent replicas serve (or start)
    DRAINING = "Draining"  # lent replicas leave service before a trainer Job


@dataclass(frozen=True)
class LentPod:
    name: str
    containers_ready: bool
    in_service: bool  # its SERVING_GATE condition is True
    in_flight: int | None  # requests running or waiting (vllm:num_requests_*); None: not read
    terminating: bool = False  # deleted, not gone yet: its GPUs are not free


@dataclass(frozen=True)
class DrainInput:
    lend: bool  # the fleet's verdict (FleetDecision.lend)
    replicas: int  # lent replicas while lending
    pods: tuple[LentPod, ...]
    now: float
    drain_s: float  # the drain bound
    draining_since: float | None = None


@dataclass(frozen=True)
class DrainPlan:
    state: LendState
    replicas: int  # the lent Deployment's replicas
    into_service: tuple[str, ...] = ()  # pods whose gate goes True
    out_of_service: tuple[str, ...] = ()  # pods whose gate goes False
    draining_since: float | None = None
    holds_training: bool = False  # lent pods still hold training GPUs: no Job launches
    drained: bool = False  # this pass ends the drain (the pods are deleted)
    message: str = ""


def plan_lending(inp: DrainInput) -> DrainPlan:
    live = [p for p in inp.pods if not p.terminating]
    if inp.lend:
        ready = tuple(p.name for p in live if p.containers_ready and not p.in_service)
        return DrainPlan(LendState.LENT, inp.replicas, into_service=ready, holds_training=bool(inp.pods),
                         message=f"{inp.replicas} replica(s) lent, {sum(p.in_service for p in live)} in service")
    if not live:
        gone = not inp.pods
        return DrainPlan(LendState.IDLE if gone else LendState.DRAINING, 0, holds_training=not gone,
                         draining_since=None if gone else inp.draining_since,
                         message="nothing lent" if gone else f"{len(inp.pods)} lent pod(s) terminating")
    since = inp.now if inp.draining_since is None else inp.draining_since
    leaving = tuple(p.name for p in live if p.in_service)
    busy = [p for p in live if not _idle(p)]
    waited = inp.now - since
    if (not busy and inp.draining_since is not None) or waited >= inp.drain_s:
        left = f"; bound of {inp.drain_s:.0f}s reached with {_in_flight(busy)} request(s) in flight" if busy else ""
        return DrainPlan(LendState.DRAINING, 0, out_of_service=leaving, draining_since=since, holds_training=True,
                         drained=True, message=f"{len(live)} lent pod(s) drained after {waited:.0f}s{left}")
    return DrainPlan(LendState.DRAINING, len(live), out_of_service=leaving, draining_since=since,
                     holds_training=True,
                     message=f"draining {len(live)} lent pod(s): {_in_flight(busy)} request(s) in flight, "
                             f"{waited:.0f}s of {inp.drain_s:.0f}s")


def _idle(pod: LentPod) -> bool:
    """Out of service (as an earlier pass left it) with nothing in flight; a pod whose containers never
    became ready never took a request."""
    if not pod.containers_ready and not pod.in_service:
        return True
    return not pod.in_service and pod.in_flight == 0


def _in_flight(pods: list[LentPod]) -> int:
    return sum(p.in_flight or 0 for p in pods)
