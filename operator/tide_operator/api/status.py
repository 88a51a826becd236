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
    status: ConditionStatus
    reason: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)]
    message: Message
    """Required like metav1.Condition's; never empty (the v1.20 API server reads "" as null)."""
    last_transition_time: Time
    observed_generation: int = Field(default=0, ge=0)


class InferencePoolStatus(StatusModel):
    gpu_class: GpuClassName | None = None
    nodes: int = Field(default=0, ge=0)
    """Nodes of the class with room for at least one replica."""
    replicas: int = Field(default=0, ge=0)
    replicas_ready: int = Field(default=0, ge=0)


class TrainingPoolStatus(StatusModel):
    gpu_class: GpuClassName | None = None
    nodes: int = Field(default=0, ge=0)
    """Nodes of the class with room for one trainer Job."""


class DraftStatus(StatusModel):
    current: DraftVersion | None = None
    """Promoted draft version (``vN``), or ``initial``."""
    candidate: DraftVersion | None = None
    """Draft being evaluated or canaried."""
    served_revision: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    """Target revision the current draft is pinned to."""


class CanaryStatus(StatusModel):
    """The canary in progress: the pods that got the candidate when it started (a rollback swaps these back)."""

    candidate: DraftVersion
    pods: tuple[Annotated[str, StringConstraints(min_length=1, max_length=253)], ...] = Field(
        default=(), max_length=64)


class SpeculationStatus(StatusModel):
    enabled: bool = False
    num_speculative_tokens: int = Field(default=0, ge=0)
    modelled_speedup_percent: int | None = Field(default=None, ge=0)
    """Modelled speedup at the observed batch size, in percent (135 = 1.35x)."""
    acceptance_length_milli: int | None = Field(default=None, ge=0)
    """Mean acceptance length (tokens per verify step) in thousandths (2340 = 2.34)."""


class Decision(StatusModel):
    time: Time
    action: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    reason: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)]
    message: Message | None = None


class TideDeploymentStatus(StatusModel):
    phase: Phase = Phase.PENDING
    observed_generation: int = Field(default=0, ge=0)
    conditions: tuple[Condition, ...] = Field(
        default=(),
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    inference_pool: InferencePoolStatus | None = None
    training_pool: TrainingPoolStatus | None = None
    draft: DraftStatus | None = None
    canary: CanaryStatus | None = None
    speculation: SpeculationStatus | None = None
    last_decision: Decision | None = None
    selector: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None
    """Label selector of the vLLM pods (the scale subresource's labelSelectorPath)."""
    replicas: int = Field(default=0, ge=0)
    """Observed vLLM replicas (the scale subresource's statusReplicasPath)."""
    control_state: dict[str, Any] | None = None
    """The control policy's own state (drift averages, lifecycle, dwell timers), opaque; kept in status
    so that an operator restart resumes exactly where it was."""
