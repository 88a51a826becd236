"""Condition types, reason constants and ``set_condition`` (metav1.Condition semantics).

As in kubernetes-sigs/jobset: one pure function sets a condition, and ``lastTransitionTime``
moves only when the status flips, so a steady state writes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from tide_operator.api.status import Condition, ConditionStatus


class ConditionType(StrEnum):
    READY = "Ready"
    SCHEDULED = "Scheduled"
    SPECULATION_ENABLED = "SpeculationEnabled"
    COLLECTING = "Collecting"
    TRAINING = "Training"
    PROMOTING = "Promoting"
    DEGRADED = "Degraded"
    # Only without spec.draft.initial: the bootstrap head (tide_trainer init) the pods launch with at K=0
    BOOTSTRAP_DRAFT_READY = "BootstrapDraftReady"


class Reason:
    """Reasons (CamelCase, ``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$``) shared by handlers and tests."""

    # Ready
    INVALID_SPEC = "InvalidSpec"
    POD_POLICY_VIOLATION = "PodPolicyViolation"  # the spec asks for more than the operator's podPolicy allows
    STORAGE_POLICY_VIOLATION = "StoragePolicyViolation"  # S3 outside what the operator config lends it
    MISSING_CREDENTIALS = "MissingCredentials"
    PROMETHEUS_NOT_ALLOWED = "PrometheusNotAllowed"  # spec.prometheus.url is outside prometheus.allowedUrls
    WAITING_FOR_REPLICAS = "WaitingForReplicas"
    REPLICAS_READY = "ReplicasReady"
    SCALED_TO_ZERO = "ScaledToZero"
    # Scheduled (pool choice)
    POOLS_CHOSEN = "PoolsChosen"  # the inference pool has room for every replica now
    # The pods are created and wait for the scheduler (or an autoscaler): not an error.
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    NO_ALLOWED_GPU_CLASS = "NoAllowedGPUClass"  # nothing can be placed (parse_spec refuses such specs first)
    # SpeculationEnabled
    SPEEDUP_ABOVE_MARGIN = "SpeedupAboveMargin"
    SPEEDUP_BELOW_MARGIN = "SpeedupBelowMargin"
    FORCED_ON = "ForcedOn"
    FORCED_OFF = "ForcedOff"
    NO_DRAFT = "NoDraft"
    # Collecting / Training / Promoting
    DRIFT_DETECTED = "DriftDetected"
    CAPTURE_DISABLED = "CaptureDisabled"
    BUFFER_FILLING = "BufferFilling"
    TRAINER_RUNNING = "TrainerRunning"
    TRAINER_FAILED = "TrainerFailed"
    TRAINING_BACKOFF = "TrainingBackoff"
    CANARY_RUNNING = "CanaryRunning"
    CANARY_ABORTED = "CanaryAborted"
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"
    PAUSED = "Paused"
    DRAFT_PINNED = "DraftPinned"
    # BootstrapDraftReady (and Degraded when the init Job failed)
    BOOTSTRAP_JOB_RUNNING = "BootstrapJobRunning"  # serving without speculation until the head is written
    BOOTSTRAP_DRAFT_LAUNCHED = "BootstrapDraftLaunched"  # the pods launch with the head at K=0: capture works
    BOOTSTRAP_JOB_FAILED = "BootstrapJobFailed"  # every attempt failed; deleting the Job retries
    BOOTSTRAP_NOT_NEEDED = "BootstrapNotNeeded"  # spec.draft.initial is set
    # Degraded
    PROMETHEUS_UNREACHABLE = "PrometheusUnreachable"
    STORAGE_UNREACHABLE = "StorageUnreachable"
    SERVING_PODS_UNREACHABLE = "ServingPodsUnreachable"  # a control route failed or did not answer
    KUBERNETES_API_ERROR = "KubernetesApiError"  # creating, deleting or patching a child was refused
    TRAINER_JOB_INVALID = "TrainerJobInvalid"  # the trainer Job cannot be built from the spec and config
    CHILD_CONFLICT = "ChildConflict"  # an object named like a child lacks our owner UID: left untouched
    CHECKSUM_MISMATCH = "ChecksumMismatch"
    INCOMPATIBLE_DRAFT = "IncompatibleDraft"
    UNKNOWN_VERSION = "UnknownVersion"  # a promote or rollback by hand names no promoted draft
    MANIFEST_INVALID = "ManifestInvalid"
    AS_EXPECTED = "AsExpected"


def rfc3339(moment: datetime) -> str:
    """Kubernetes' time format: UTC, whole seconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: tuple[Condition, ...] | list[Condition],
    type_: str,
    status: ConditionStatus | str,
    *,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> tuple[tuple[Condition, ...], bool]:
    """Return (conditions with ``type_`` set, whether anything changed); the input is not modified.

    The new condition keeps its position; a new type is appended.
    """
    status = ConditionStatus(status)
    message = message or reason  # never "": the v1.20 API server reads an empty string as null
    old = next((condition for condition in conditions if condition.type == type_), None)
    flipped = old is None or old.status != status
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        last_transition_time=rfc3339(now) if flipped else old.last_transition_time,  # type: ignore[union-attr]
    )
    if new == old:
        return tuple(conditions), False
    if old is None:
        return (*conditions, new), True
    return tuple(new if condition.type == type_ else condition for condition in conditions), True


def find_condition(conditions: tuple[Condition, ...] | list[Condition], type_: str) -> Condition | None:
    return next((condition for condition in conditions if condition.type == type_), None)
