"""The TideDeployment status: observed state only, reconstructable from the cluster and S3."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, StringConstraints

from tide_operator.api.base import ApiModel, GpuClassName
from tide_operator.api.messages import bounded_message

REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
Time = Annotated[str, StringConstraints(min_length=1, max_length=64)]
"""RFC 3339 time (``2026-01-02T03:04:05Z``), see ``conditions.rfc3339``."""
DraftVersion = Annotated[str, StringConstraints(min_length=1, max_length=64)]


def _bounded(value: object) -> object:
    return bounded_message(value) if isinstance(value, str) else value


# Every writer of a condition or decision message goes through the model: credentials are stripped
# and the length bounded (api/messages.py) before the 32 KiB limit the API server enforces is checked.
Message = Annotated[str, BeforeValidator(_bounded), StringConstraints(min_length=1, max_length=32768)]


class StatusModel(ApiModel):
    # The operator builds status in Python, so snake_case names are accepted too.
    model_config = ConfigDict(populate_by_name=True)


class Phase(StrEnum):
    PENDING = "Pending"
    SERVING = "Serving"
    COLLECTING = "Collecting"
    RECALLING = "Recalling"
    TRAINING = "Training"
    EVALUATING = "Evaluating"
    CANARY = "Canary"
    DEGRADED = "Degraded"
    INVALID = "Invalid"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(StatusModel):
    """A metav1.Condition."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)]
    """Ready, Scheduled, SpeculationEnabled, Collecting, Training, Promoting, Degraded or
    BootstrapDraftReady; one entry per type."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)]
    """Why, as a CamelCase word for machines and alerts (ReplicasReady, DriftDetected, RolledBack...)."""
    message: Message
    """Why, for humans; required like metav1.Condition's and never empty (the v1.20 API server reads
    "" as null); credentials are stripped and the length bounded."""
    last_transition_time: Time
    """When status last changed (RFC 3339); a new reason or message with the same status keeps it."""
    observed_generation: int = Field(default=0, ge=0)
    """metadata.generation of the spec the condition was set from."""


class InferencePoolStatus(StatusModel):
    """The GPU pool the vLLM pods were placed on, and how many of them are ready."""

    gpu_class: GpuClassName | None = None
    """GPU class (a catalog key such as H100) chosen for inference; absent while none can be placed."""
    nodes: int = Field(default=0, ge=0)
    """Nodes of the class with room for at least one replica."""
    replicas: int = Field(default=0, ge=0)
    """vLLM replicas asked for (spec.inference.replicas as the last pass read it)."""
    replicas_ready: int = Field(default=0, ge=0)
    """vLLM replicas ready (the vLLM Deployment's readyReplicas)."""


class ServingGroupStatus(StatusModel):
    """One serving group's Deployment (inference.servingGroups): its share of the replicas, and how many are ready."""

    gpu_class: GpuClassName
    """The GPU class (a catalog key such as H100)."""
    deployment: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    """The group's Deployment (<name>-vllm-<class>)."""
    replicas: int = Field(default=0, ge=0)
    """Replicas of the total this class runs (the split), or what a retiring group keeps."""
    replicas_ready: int = Field(default=0, ge=0)
    """Its ready replicas (the Deployment's readyReplicas)."""
    retiring: bool = False
    """The class left the serving groups: it keeps serving until the others are ready, then goes."""


class TrainingPoolStatus(StatusModel):
    """The GPU pool trainer Jobs are placed on."""

    gpu_class: GpuClassName | None = None
    """GPU class chosen for training; absent while no class has room for a trainer Job."""
    nodes: int = Field(default=0, ge=0)
    """Nodes of the class with room for one trainer Job."""


class LendingStatus(StatusModel):
    """Serving replicas lent on the training class while no trainer Job needs it (training.lendWhenIdle)."""

    gpu_class: GpuClassName | None = None
    """The training class the replicas are lent on; absent while none is chosen."""
    state: Annotated[str, StringConstraints(min_length=1, max_length=32)] = "Idle"
    """Idle (nothing lent), Lent (lent replicas start or serve) or Draining (they leave service
    before a trainer Job: out of endpoints, in-flight requests finish, bounded)."""
    replicas: int = Field(default=0, ge=0)
    """Lent replicas asked for (the <name>-lent Deployment's replicas)."""
    replicas_in_service: int = Field(default=0, ge=0)
    """Lent pods in service (their tide.dev/serving readiness gate True)."""
    reason: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)] | None = None
    """The fleet's verdict: Lent, TrainingJobRunning, TrainingJobDue, TrainingJobSoon, LendingDoesNotPay..."""
    message: Message | None = None
    """The verdict with its numbers (what the fleet serves, modelled), or the drain's progress."""
    draining_since: Time | None = None
    """When the drain began (RFC 3339); kept so a restarted operator keeps the drain's bound."""


class RouteBackend(StatusModel):
    """One GPU class's Service behind the HTTPRoute, at its capacity weight."""

    gpu_class: GpuClassName
    """The GPU class (a catalog key such as H100)."""
    service: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    """Its Service (<name>-vllm-<class>), selected by tide.dev/gpu-class."""
    weight: int = Field(ge=0)
    """Its pods in service x GPUs x catalog throughput x modelled speedup (0: none in service)."""


class RoutingStatus(StatusModel):
    """Capacity-weighted routing (inference.gateway): the HTTPRoute the operator applied and its backends.

    Kept so that what it applied is removed once unwanted: the HTTPRoute and every class Service when the
    gateway leaves the spec, a class's Service when the class leaves the route."""

    route: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    """The HTTPRoute's name (<name>-vllm)."""
    backends: tuple[RouteBackend, ...] = Field(
        default=(),
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["gpuClass"]},
    )
    """One backend per GPU class with its weight (0: no pod in service, or a Service still being removed)."""


class DraftStatus(StatusModel):
    """The draft versions in play for the current target revision."""

    current: DraftVersion | None = None
    """Draft version the fleet serves: the promoted vN for this target revision, or initial
    (spec.draft.initial); absent while none is served."""
    candidate: DraftVersion | None = None
    """Draft version being evaluated or canaried; absent otherwise."""
    served_revision: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    """Target revision the current draft is pinned to."""


class CanaryStatus(StatusModel):
    """The canary in progress: the pods that got the candidate when it started (a rollback swaps these back)."""

    candidate: DraftVersion
    """Draft version under test on the canary pods."""
    pods: tuple[Annotated[str, StringConstraints(min_length=1, max_length=253)], ...] = Field(
        default=(), max_length=64)
    """Names of the vLLM pods serving the candidate; the others are the control."""


class SpeculationStatus(StatusModel):
    """The fleet's speculative decoding, as the last control pass decided and measured it."""

    enabled: bool = False
    """Whether the vLLM pods speculate (the SpeculationEnabled condition says why)."""
    num_speculative_tokens: int = Field(default=0, ge=0)
    """Upper bound on tokens drafted per step (draft.numSpeculativeTokens); 0 while speculation is off."""
    modelled_speedup_percent: int | None = Field(default=None, ge=0)
    """Modelled speedup at the observed batch size, in percent (135 = 1.35x); absent until measured."""
    acceptance_length_milli: int | None = Field(default=None, ge=0)
    """Mean acceptance length (tokens per verify step) in thousandths (2340 = 2.34); kept for older
    readers, acceptanceLength holds the same value as a number."""
    acceptance_length: float | None = Field(default=None, ge=0)
    """Mean acceptance length of the served draft over the last rate window (else modelled from its
    last known acceptance rate): tokens per verify step, bonus token included (1.0 = nothing
    accepted), to thousandths; absent while unknown."""


class Decision(StatusModel):
    """The last action the control loop took (each action is also an Event)."""

    time: Time
    """When the action was decided (RFC 3339)."""
    action: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    """The action: SetSpeculation, SetCapture, LaunchTraining, StartCanary, Promote, RollBack, ServeDraft..."""
    reason: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)]
    """Why, as a CamelCase word."""
    message: Message | None = None
    """Why, for humans, with the numbers the decision read."""


class TideDeploymentStatus(StatusModel):
    """Observed state, written by the operator once per pass; reconstructable from the cluster and S3."""

    phase: Phase = Phase.PENDING
    """Pending (not placed yet, or no vLLM replica ready), Serving, Collecting (capturing hidden states
    after a drift), Recalling (an evaluation Job scores the draft pool on the traffic since a drift),
    Training (a trainer Job runs), Evaluating (a candidate's held-out result is judged),
    Canary, Invalid (the spec was refused: the Ready condition names the field) or Degraded (reserved:
    trouble shows as the Degraded condition)."""
    observed_generation: int = Field(default=0, ge=0)
    """metadata.generation of the spec the last pass acted on."""
    conditions: tuple[Condition, ...] = Field(
        default=(),
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Conditions, one per type (Ready, Scheduled, SpeculationEnabled, Collecting, Training,
    Promoting, Degraded, BootstrapDraftReady); each flip is also an Event."""
    inference_pool: InferencePoolStatus | None = None
    serving_groups: tuple[ServingGroupStatus, ...] | None = Field(
        default=None, max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["gpuClass"]},
    )
    """Present with inference.servingGroups (or while a group's Deployment retires): a Deployment per class."""
    training_pool: TrainingPoolStatus | None = None
    lending: LendingStatus | None = None
    """Present once training.lendWhenIdle was set: what is lent to serving on the training class."""
    routing: RoutingStatus | None = None
    """Present while inference.gateway routes by capacity: the HTTPRoute and each class's weight."""
    draft: DraftStatus | None = None
    canary: CanaryStatus | None = None
    """Present only while a canary runs."""
    speculation: SpeculationStatus | None = None
    last_decision: Decision | None = None
    selector: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None
    """Label selector of the vLLM pods (the scale subresource's labelSelectorPath)."""
    replicas: int = Field(default=0, ge=0)
    """Ready vLLM replicas (the scale subresource's statusReplicasPath, which an autoscaler reads)."""
    control_state: dict[str, Any] | None = None
    """The control policy's own state (drift averages, lifecycle, dwell timers), opaque; kept in status
    so that an operator restart resumes exactly where it was."""
