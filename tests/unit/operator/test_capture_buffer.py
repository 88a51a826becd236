"""The capture buffer is kept within spec.control.capture's caps after each control pass."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.exceptions import EndpointConnectionError

from tide_contracts.registry import CaptureLimits, CaptureObject, captures_to_prune
from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.capture_buffer import captures_to_delete, prune_capture_buffer
from tide_operator.control.lifecycle import CaptureParams
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.policy import PolicyState
from tide_operator.control_loop import SensorReading
from tide_operator.control_step import enforce_buffer_caps
from tide_operator.serving_status import StatusDraft

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PREFIX = "ns/chat/captures/"
CAPS = CaptureParams(max_buffer_samples=250, max_buffer_bytes=10_000, retention_s=3600)


def shard(name: str, age_min: float, samples: int = 100, size: int = 1000) -> CaptureObject:
    return CaptureObject(PREFIX + name, size, NOW.timestamp() - 60 * age_min, samples)


BUFFER = (shard("c0", 50), shard("c1", 40), shard("c2", 30), shard("c3", 20))  # 400 samples, 4000 bytes


class FakeRegistry:
    """Deletes what the contract's prune would; records the listing it was handed."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[CaptureLimits, list[CaptureObject] | None]] = []
        self.fail = fail

    def prune_captures(self, limits, now, captures=None):
        if self.fail:
            raise EndpointConnectionError(endpoint_url="http://s3.local")
        self.calls.append((limits, captures))
        return captures_to_prune(captures or [], limits, now.timestamp())

    def key(self, *parts: str) -> str:
        return "ns/chat/" + "/".join(parts)


@pytest.mark.parametrize(("params", "phase", "deleted"), [
    (CAPS, LifecyclePhase.COLLECTING, ["c0", "c1"]),  # over maxBufferSamples: oldest first
    (CaptureParams(max_buffer_bytes=2500), LifecyclePhase.SERVING, ["c0", "c1"]),
    (CaptureParams(retention_s=35 * 60), LifecyclePhase.CANARY, ["c0", "c1"]),  # 50 and 40 minutes old
    (CaptureParams(max_buffer_samples=400, max_buffer_bytes=4000), LifecyclePhase.COLLECTING, []),  # at the caps
    (CAPS, LifecyclePhase.TRAINING, []),  # the trainer is reading the buffer
])
def test_what_a_pass_deletes(params: CaptureParams, phase: LifecyclePhase, deleted: list[str]) -> None:
    due = captures_to_delete(BUFFER, params, phase, NOW.timestamp())
    assert [c.key.removeprefix(PREFIX) for c in due] == deleted


def test_nothing_due_makes_no_s3_call() -> None:
    registry = FakeRegistry()
    within = CaptureParams(max_buffer_samples=4096)
    assert prune_capture_buffer(registry, BUFFER, within, LifecyclePhase.COLLECTING, NOW) is None
    assert prune_capture_buffer(registry, BUFFER, CAPS, LifecyclePhase.TRAINING, NOW) is None
    assert registry.calls == []


def test_pruning_reuses_the_sensors_listing_and_counts_what_went() -> None:
    registry = FakeRegistry()
    pruned = prune_capture_buffer(registry, BUFFER, CAPS, LifecyclePhase.COLLECTING, NOW)
    assert pruned is not None
    assert (pruned.shards, pruned.samples, pruned.bytes) == (2, 200, 2000)
    [(limits, listing)] = registry.calls
    assert listing == list(BUFFER)  # no second listing (it costs a HEAD per shard)
    assert (limits.max_samples, limits.max_bytes, limits.retention_s) == (250, 10_000, 3600)


def draft() -> StatusDraft:
    return StatusDraft(TideDeploymentStatus(phase=Phase.SERVING), generation=1, now=NOW)


def test_an_event_only_when_something_was_pruned() -> None:
    state, reading = PolicyState(), SensorReading(None, captures=BUFFER)
    quiet = draft()
    enforce_buffer_caps(quiet, FakeRegistry(), reading, CaptureParams(), state, NOW.timestamp())
    assert quiet.events == []
    busy = draft()
    enforce_buffer_caps(busy, FakeRegistry(), reading, CAPS, state, NOW.timestamp())
    [event] = busy.events
    assert (event.type, event.reason, event.action) == ("Normal", "CapturesPruned", "PruneCaptures")
    assert "2 oldest capture shards (200 samples, 2000 bytes)" in event.message
    assert "maxBufferSamples=250" in event.message


def test_s3_down_while_pruning_leaves_the_pass_alone() -> None:
    unreachable = draft()
    enforce_buffer_caps(unreachable, FakeRegistry(fail=True), SensorReading(None, captures=BUFFER), CAPS,
                        PolicyState(), NOW.timestamp())
    assert unreachable.events == []
