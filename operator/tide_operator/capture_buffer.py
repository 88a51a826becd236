"""Keep the S3 capture buffer within spec.control.capture: retention, maxBufferSamples, maxBufferBytes.

Runs after the control pass (so at most once per control interval) on the listing the sensors
already made: when nothing is past a cap it makes no S3 call at all. Oldest shards go first; the
registry deletes only under the deployment's captures/ prefix and refuses anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tide_contracts.registry import CaptureLimits, CaptureObject, DraftRegistry, captures_to_prune
from tide_operator.control.lifecycle import CaptureParams
from tide_operator.control.lifecycle import Phase as LifecyclePhase

PRUNE_REASON = "CapturesPruned"


@dataclass(frozen=True)
class PrunedCaptures:
    shards: int
    samples: int
    bytes: int

    def message(self, limits: CaptureLimits) -> str:
        return (f"deleted the {self.shards} oldest capture shards ({self.samples} samples, {self.bytes} bytes): "
                f"buffer caps retention={limits.retention_s:.0f}s maxBufferSamples={limits.max_samples} "
                f"maxBufferBytes={limits.max_bytes}")


def capture_limits(params: CaptureParams) -> CaptureLimits:
    return CaptureLimits(max_samples=params.max_buffer_samples, max_bytes=params.max_buffer_bytes,
                         retention_s=params.retention_s)


def captures_to_delete(captures: Sequence[CaptureObject], params: CaptureParams, phase: LifecyclePhase,
                       now: float) -> list[CaptureObject]:
    """What this pass deletes (pure): oldest first past a cap, nothing while a trainer Job runs.

    A running trainer has listed its window of shards and reads them one by one: deleting one
    under it would fail the run, so pruning waits for the run to end (the caps may be exceeded
    for that long).
    """
    if phase is LifecyclePhase.TRAINING:
        return []
    doomed = set(captures_to_prune(list(captures), capture_limits(params), now))
    return [c for c in captures if c.key in doomed]


def prune_capture_buffer(registry: DraftRegistry, captures: Sequence[CaptureObject], params: CaptureParams,
                         phase: LifecyclePhase, now: datetime) -> PrunedCaptures | None:
    """Delete what ``captures_to_delete`` names; None when nothing was due (no S3 call then)."""
    due = captures_to_delete(captures, params, phase, now.timestamp())
    if not due:
        return None
    deleted = set(registry.prune_captures(capture_limits(params), now, captures=list(captures)))
    gone = [c for c in due if c.key in deleted]
    return PrunedCaptures(len(gone), sum(c.samples for c in gone), sum(c.size for c in gone))
