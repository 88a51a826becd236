"""Lend the training class's idle GPUs to serving (training.lendWhenIdle), one control pass at a time.

The fleet split (control/fleet.py) says whether lending pays now; control/lending.py says what the
lent pods get; this module reads what it needs and carries that out: the <name>-lent Deployment's
replicas, the lent pods' readiness gate, and the training hold while lent pods still hold the GPUs.
It runs in the control pass, so the leader alone lends (issue 15). State between passes lives in
status.lending (the drain's start survives an operator restart).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.pod_metrics import requests_in_flight
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.conditions import rfc3339
from tide_operator.api.status import LendingStatus
from tide_operator.config import OperatorConfig
from tide_operator.control.fleet import (
    ClassGroup,
    FleetDecision,
    FleetInput,
    LendTiming,
    Routing,
    decide_fleet,
)
from tide_operator.control.lending import SERVING_GATE, DrainInput, DrainPlan, LendState, LentPod, plan_lending
from tide_operator.control.lifecycle_training import seconds_to_job
from tide_operator.control.lifecycle_types import Phase as LifecyclePhase
from tide_operator.control.placement import Placement
from tide_operator.control.policy import PolicyParams, PolicyState, lifecycle_params
from tide_operator.manifests import labels, names
from tide_operator.manifests.ownership import ChildConflict
from tide_operator.manifests.serving import bootstrap_draft_of, launch_bands_of
from tide_operator.manifests.serving_fleet import build_lent_deployment
from tide_operator.passes.control_loop import SensorReading
from tide_operator.passes.serving_groups import launched_deployment
from tide_operator.passes.serving_status import EventNote, StatusDraft

InFlight = Callable[[str, int], int | None]  # (pod IP, port) -> requests running or waiting
TRAINING_HELD = "LentReplicasDraining"  # Observation.training_deferred while lent pods hold the GPUs


@dataclass(frozen=True)
class Lending:
    """What the pass needs besides the spec: the cluster, and how a pod's requests in flight are read."""

    cluster: Cluster
    config: OperatorConfig
    adopt: Any
    in_flight: InFlight = requests_in_flight
    routing: Routing = Routing.EVEN  # WEIGHTED where an HTTPRoute splits requests by capacity (passes/routing.py)

    @property
    def timing(self) -> LendTiming:
        return LendTiming(startup_s=self.config.lending.startup_seconds, drain_s=self.config.lending.drain_seconds)


def lend(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement, draft: StatusDraft,
         state: PolicyState, params: PolicyParams, reading: SensorReading, lending: Lending,
         now_s: float) -> SensorReading:
    """Carry out this pass's lending; the reading comes back with training held while lent pods remain."""
    before = draft.status.lending
    if not spec.training.lend_when_idle and before is None:
        return reading  # never lent: no read, no write
    pods = _lent_pods(lending.cluster.pods(namespace, labels.lent_selector(name)), spec.inference.port, lending)
    fleet_input = _fleet_input(spec, placement, draft, state, reading, bool(pods), lending)
    fleet = decide_fleet(replace(fleet_input, seconds_to_job=_seconds_to_job(state, params, reading, now_s)))
    since = _parse(before.draining_since) if before and before.draining_since else None
    plan = plan_lending(DrainInput(fleet.lend, fleet_replicas(spec, placement, fleet), pods, now_s,
                                   lending.timing.drain_s, since))
    try:
        _carry_out(name, namespace, spec, placement, plan, lending, draft.now)
    except (ApiException, ChildConflict, ValueError) as e:
        plan = replace(plan, message=f"lending not carried out, again next pass: {e}")
    _report(draft, placement, fleet, plan, pods, before)
    if plan.holds_training and state.lifecycle.active_run is None and reading.observation is not None:
        reading = replace(reading, observation=replace(reading.observation, training_deferred=TRAINING_HELD))
    return reading


def fleet_replicas(spec: TideDeploymentSpec, placement: Placement, fleet: FleetDecision) -> int:
    return lendable_replicas(spec, placement) if fleet.lend else 0


def lendable_replicas(spec: TideDeploymentSpec, placement: Placement) -> int:
    """The training pool's own share: one trainer Job's GPUs (gpusPerJob) as serving replicas, where they
    fit now. Never more: lending borrows what training holds, not every free GPU of a shared cluster."""
    per_replica = spec.inference.gpus_per_replica
    return min(placement.training.fit_for(per_replica), spec.training.gpus_per_job // per_replica)


def _fleet_input(spec: TideDeploymentSpec, placement: Placement, draft: StatusDraft, state: PolicyState,
                 reading: SensorReading, lent: bool, lending: Lending) -> FleetInput:
    """The split's input; the time to the next Job is filled in once the training verdict is known."""
    inference, training = placement.inference.gpu_class, placement.training.gpu_class
    speedup = modelled_speedup(draft)
    serving = tuple(ClassGroup(g.choice.gpu_class.name, g.replicas, g.gpus_per_replica,
                               g.choice.gpu_class.inference_throughput, speedup)
                    for g in placement.groups if g.choice.gpu_class is not None)
    if inference is not None and not serving:
        serving = (ClassGroup(inference.name, spec.inference.replicas, spec.inference.gpus_per_replica,
                              inference.inference_throughput, speedup),)
    lendable = None
    if training is not None and _lendable(spec, placement) and lendable_replicas(spec, placement) > 0:
        lendable = ClassGroup(training.name, lendable_replicas(spec, placement),
                              spec.inference.gpus_per_replica, training.inference_throughput, speedup)
    lifecycle = state.lifecycle
    running = lifecycle.active_run is not None or lifecycle.phase in (LifecyclePhase.TRAINING, LifecyclePhase.RECALLING)
    return FleetInput(serving, lendable, spec.training.lend_when_idle, lending.routing, running, None,
                      lending.timing, lent)


def _lendable(spec: TideDeploymentSpec, placement: Placement) -> bool:
    """A class to lend, the serving pool whole first (lent pods never take room its replicas need), and
    an image for the training class's vendor (a spec's image is built for the inference class's)."""
    inference, training = placement.inference.gpu_class, placement.training.gpu_class
    if inference is None or training is None or not placement.inference.has_capacity:
        return False
    return spec.inference.image is None or training.vendor == inference.vendor


def modelled_speedup(draft: StatusDraft) -> float:
    """The speedup the last pass modelled while speculation is on (1.0 while it is off)."""
    speculation = draft.status.speculation
    if speculation is None or not speculation.enabled or speculation.modelled_speedup_percent is None:
        return 1.0
    return speculation.modelled_speedup_percent / 100


def _seconds_to_job(state: PolicyState, params: PolicyParams, reading: SensorReading, now_s: float) -> float | None:
    """When the lifecycle's next Job is due, at the capture rate since collection began (None: none foreseen)."""
    observation, lifecycle = reading.observation, state.lifecycle
    if observation is None or lifecycle.phase_since is None:
        return None
    fresh = max(0, observation.buffer_samples - lifecycle.buffer_baseline)
    rate = fresh / max(now_s - lifecycle.phase_since, 1.0)
    return seconds_to_job(lifecycle, lifecycle_params(params), observation.buffer_samples, observation.pool,
                          now_s, rate)


def _lent_pods(pods: list[dict[str, Any]], port: int, lending: Lending) -> tuple[LentPod, ...]:
    return tuple(_lent_pod(p, port, lending.in_flight) for p in sorted(pods, key=lambda p: p["metadata"]["name"]))


def _lent_pod(pod: dict[str, Any], port: int, in_flight: InFlight) -> LentPod:
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") == "True" for c in status.get("conditions") or []}
    ready = conditions.get("ContainersReady", False)
    in_service = conditions.get(SERVING_GATE, False)
    # Requests are read only where some could be in flight: a pod that never served holds none.
    requests = in_flight(status.get("podIP", ""), port) if ready or in_service else 0
    return LentPod(pod["metadata"]["name"], ready, in_service, requests,
                   terminating=bool(pod["metadata"].get("deletionTimestamp")))


def _carry_out(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement, plan: DrainPlan,
               lending: Lending, now: datetime) -> None:
    cluster = lending.cluster
    for pod in plan.out_of_service:  # out of service first: a drain never deletes a pod still in endpoints
        cluster.set_pod_condition(namespace, pod, _gate(False, "Draining", "lent replica leaves service", now))
    for pod in plan.into_service:
        cluster.set_pod_condition(namespace, pod, _gate(True, "Lent", "lent replica serves", now))
    live = cluster.read("Deployment", namespace, names.lent_serving_name(name))
    if live is None and plan.replicas == 0:
        return  # nothing lent and nothing to lend: no Deployment is made for it
    if placement.training.gpu_class is None:
        return  # no class to lend on: a live lent Deployment stays as it is until one is chosen
    main = launched_deployment(name, placement, lambda dep: cluster.deployment(namespace, dep)) or {}
    desired = build_lent_deployment(name, namespace, spec, placement, lending.config, plan.replicas,
                                    bootstrap_draft=bootstrap_draft_of(main), launch_bands=launch_bands_of(main))
    cluster.apply(lending.adopt(desired), live)


def _gate(ok: bool, reason: str, message: str, now: datetime) -> dict[str, Any]:
    return {"type": SERVING_GATE, "status": "True" if ok else "False", "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(now)}


def _report(draft: StatusDraft, placement: Placement, fleet: FleetDecision, plan: DrainPlan,
            pods: tuple[LentPod, ...], before: LendingStatus | None) -> None:
    training = placement.training.gpu_class
    since = datetime.fromtimestamp(plan.draining_since, UTC) if plan.draining_since is not None else None
    message = fleet.message if plan.state is LendState.LENT or not pods else f"{fleet.message}; {plan.message}"
    after = LendingStatus(gpu_class=training.name if training else None, state=plan.state.value,
                          replicas=plan.replicas, replicas_in_service=sum(p.in_service for p in pods),
                          reason=fleet.reason.value, message=message,
                          draining_since=rfc3339(since) if since else None)
    draft.status = draft.status.model_copy(update={"lending": after})
    was = before.state if before else LendState.IDLE.value
    if after.state != was:
        reason = {LendState.LENT: "LendingStarted", LendState.DRAINING: "LendingDraining",
                  LendState.IDLE: "LendingReclaimed"}[plan.state]
        draft.events.append(EventNote("Normal", reason, message))
    elif plan.drained:
        draft.events.append(EventNote("Normal", "LentReplicasDrained", plan.message))


def _parse(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
