"""The status a reconcile pass reports, computed from what it observed (pure).

Conditions go through ``set_condition``, so a steady state produces an identical status and the
handler writes nothing; each condition that flips becomes an Event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tide_operator.api.conditions import ConditionType, Reason, set_condition
from tide_operator.api.messages import bounded_message
from tide_operator.api.status import (
    Condition,
    ConditionStatus,
    InferencePoolStatus,
    Phase,
    TideDeploymentStatus,
    TrainingPoolStatus,
)
from tide_operator.control.placement import Placement


@dataclass(frozen=True)
class ServingObservation:
    """What the pass saw of the vLLM Deployment it owns."""

    replicas: int
    ready_replicas: int
    selector: str


@dataclass(frozen=True)
class EventNote:
    type: str  # Normal | Warning
    reason: str
    message: str
    action: str = ""  # the control action behind it, for the decisions metric
    training_outcome: str = ""  # succeeded | failed: a trainer Job ended (the training jobs metric)

    def __post_init__(self) -> None:
        # Credentials out and length bounded once, where every Event of a pass is made (api/messages.py).
        object.__setattr__(self, "message", bounded_message(self.message))


@dataclass
class StatusDraft:
    """Status under construction for one pass, plus the Events its condition flips imply."""

    status: TideDeploymentStatus
    generation: int
    now: datetime
    events: list[EventNote] = field(default_factory=list)
    consumed_requests: list[str] = field(default_factory=list)  # one-shot annotations to remove (control/manual.py)

    def condition(self, type_: str, ok: bool | None, reason: str, message: str, warn: bool = False) -> None:
        status = ConditionStatus.UNKNOWN if ok is None else ConditionStatus.TRUE if ok else ConditionStatus.FALSE
        old = _find(self.status.conditions, type_)
        conditions, changed = set_condition(self.status.conditions, type_, status, reason=reason, message=message,
                                            generation=self.generation, now=self.now)
        self.status = self.status.model_copy(update={"conditions": conditions})
        if changed and (old is None or old.status != status or old.reason != reason):
            self.events.append(EventNote("Warning" if warn else "Normal", reason, f"{type_}={status}: {message}"))

    def update(self, **fields: object) -> None:
        self.status = self.status.model_copy(update=fields)


def _find(conditions: tuple[Condition, ...], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def invalid(draft: StatusDraft, reason: str, field_path: str, message: str) -> None:
    """An invalid spec: say which field, change nothing else (children stay as they were)."""
    draft.condition(ConditionType.READY, False, reason, f"{field_path}: {message}", warn=True)
    draft.update(phase=Phase.INVALID, observed_generation=draft.generation)


# The message of a conflict found by the reconcile pass (the control pass words its own): a later
# pass clears only this one, so a trainer Job conflict reported by the control pass never flaps.
CHILDREN_CONFLICT_PREFIX = "children not owned by this TideDeployment: "


def child_conflict(draft: StatusDraft, message: str) -> None:
    """Objects named like children are someone else's: report, write nothing, use nothing."""
    draft.condition(ConditionType.DEGRADED, True, Reason.CHILD_CONFLICT, CHILDREN_CONFLICT_PREFIX + message, warn=True)


def children_owned(draft: StatusDraft) -> None:
    """Clear a conflict this pass no longer finds (the foreign objects were removed)."""
    old = _find(draft.status.conditions, ConditionType.DEGRADED)
    if old is not None and old.reason == Reason.CHILD_CONFLICT and old.message.startswith(CHILDREN_CONFLICT_PREFIX):
        draft.condition(ConditionType.DEGRADED, False, Reason.AS_EXPECTED, "every child is owned by this deployment")


def unscheduled(draft: StatusDraft, placement: Placement) -> None:
    """No class can be placed at all (the spec allows none): nothing is created."""
    choice = placement.inference
    draft.condition(ConditionType.SCHEDULED, False, choice.reason, choice.message, warn=True)
    draft.condition(ConditionType.READY, False, choice.reason, "no inference pool: " + choice.message)
    draft.update(phase=Phase.PENDING, observed_generation=draft.generation)


def scheduled(draft: StatusDraft, placement: Placement) -> None:
    """Scheduled=True when every replica has room now, else False/WaitingForCapacity saying what is
    missing: the children are created either way and the scheduler (or an autoscaler) decides."""
    inference, training = placement.inference, placement.training
    message = f"inference on {inference.message}"
    message += f"; training on {training.message}" if training.gpu_class else f"; training: {training.message}"
    reason = Reason.POOLS_CHOSEN if inference.has_capacity else Reason.WAITING_FOR_CAPACITY
    draft.condition(ConditionType.SCHEDULED, inference.has_capacity, reason, message)
    draft.update(
        inference_pool=InferencePoolStatus(
            gpu_class=inference.gpu_class.name if inference.gpu_class else None, nodes=len(inference.nodes),
            replicas=(draft.status.inference_pool.replicas if draft.status.inference_pool else 0),
            replicas_ready=(draft.status.inference_pool.replicas_ready if draft.status.inference_pool else 0)),
        training_pool=TrainingPoolStatus(gpu_class=training.gpu_class.name if training.gpu_class else None,
                                         nodes=len(training.nodes)),
    )


def serving(draft: StatusDraft, observed: ServingObservation) -> None:
    if observed.replicas == 0:
        ready, reason, message = True, Reason.SCALED_TO_ZERO, "scaled to zero replicas"
    elif observed.ready_replicas >= observed.replicas:
        ready, reason, message = True, Reason.REPLICAS_READY, f"{observed.ready_replicas}/{observed.replicas} ready"
    else:
        ready, reason = False, Reason.WAITING_FOR_REPLICAS
        message = f"{observed.ready_replicas}/{observed.replicas} vLLM replicas ready"
    draft.condition(ConditionType.READY, ready, reason, message)
    pool = draft.status.inference_pool or InferencePoolStatus()
    # Ready means every replica; the deployment serves, and the control loop runs, once any pod does:
    # a replica Pending for want of a GPU or restarting must not freeze speculation and training for
    # the others. A pod that starts later gets the runtime settings it missed (pod_convergence.py).
    serving_any = ready or observed.ready_replicas > 0
    draft.update(
        phase=Phase.SERVING if serving_any else Phase.PENDING, observed_generation=draft.generation,
        inference_pool=pool.model_copy(update={"replicas": observed.replicas,
                                               "replicas_ready": observed.ready_replicas}),
        replicas=observed.ready_replicas, selector=observed.selector,
    )
