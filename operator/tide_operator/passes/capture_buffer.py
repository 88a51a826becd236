"""Keep the S3 capture buffer within spec.control.capture: retention, maxBufferSamples, maxBufferBytes.

Runs on its own timer (capture_retention.py), whatever Prometheus and the lifecycle are doing;
when nothing is past a cap it makes no delete. Oldest shards go first, except the shards a running
trainer claimed (control/retention.py); the registry deletes only under the deployment's
captures/ prefix and refuses anything else.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from tide_contracts.registry import CaptureLimits, CaptureObject, DraftRegistry
from tide_operator.control.lifecycle import CaptureParams
from tide_operator.control.retention import prunable, pruning_plan

PRUNE_REASON = "CapturesPruned"


@dataclass(frozen=True)
class PrunedCaptures:
    shards: int
    samples: int
    bytes: int
    kept_claimed: int = 0  # shards past a cap kept because a running trainer claimed them

    def message(self, limits: CaptureLimits) -> str:
        kept = f"; {self.kept_claimed} claimed shards kept for a running trainer" if self.kept_claimed else ""
        return (f"deleted the {self.shards} oldest capture shards ({self.samples} samples, {self.bytes} bytes): "
                f"buffer caps retention={limits.retention_s:.0f}s maxBufferSamples={limits.max_samples} "
                f"maxBufferBytes={limits.max_bytes}{kept}")


def capture_limits(params: CaptureParams) -> CaptureLimits:
    return CaptureLimits(max_samples=params.max_buffer_samples, max_bytes=params.max_buffer_bytes,
                         retention_s=params.retention_s)


def captures_to_delete(captures: Sequence[CaptureObject], params: CaptureParams, kept: Collection[str],
                       now: float) -> list[CaptureObject]:
    """What a prune deletes (pure): oldest first past a cap, never a shard in ``kept`` (claimed)."""
    return prunable(captures, capture_limits(params), kept, now)


def prune_capture_buffer(registry: DraftRegistry, captures: Sequence[CaptureObject], params: CaptureParams,
                         kept: Collection[str], now: datetime) -> PrunedCaptures | None:
    """Delete what ``captures_to_delete`` names; None when nothing was due (no delete then)."""
    due = captures_to_delete(captures, params, kept, now.timestamp())
    if not due:
        return None
    # The registry's own prune, handed the unclaimed listing and caps less what the claims hold.
    free, caps = pruning_plan(captures, capture_limits(params), kept)
    deleted = set(registry.prune_captures(caps, now, captures=free))
    gone = [c for c in due if c.key in deleted]
    overdue_kept = [c for c in prunable(captures, capture_limits(params), (), now.timestamp()) if c.key in kept]
    return PrunedCaptures(len(gone), sum(c.samples for c in gone), sum(c.size for c in gone),
                          kept_claimed=len(overdue_kept))
