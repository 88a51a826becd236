"""The capture buffer is pruned on its own timer to spec.control.capture's caps, skipping only claimed shards."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.exceptions import EndpointConnectionError

from tide_contracts.registry import CaptureLimits, CaptureObject, captures_to_prune
from tide_operator.api import parse_spec
from tide_operator.config import OperatorConfig
from tide_operator.control.lifecycle import CaptureParams
from tide_operator.passes.capture_buffer import captures_to_delete, prune_capture_buffer
from tide_operator.passes.capture_retention import _newest_first, enforce_retention, parse_claims, running_runs
from tide_operator.passes.retention_timer import retention_pass

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PREFIX = "ns/chat/captures/"
CAPS = CaptureParams(max_buffer_samples=250, max_buffer_bytes=10_000, retention_s=3600)


def shard(name: str, age_min: float, samples: int = 100, size: int = 1000) -> CaptureObject:
    return CaptureObject(PREFIX + name, size, NOW.timestamp() - 60 * age_min, samples)


BUFFER = (shard("c0", 50), shard("c1", 40), shard("c2", 30), shard("c3", 20))  # 400 samples, 4000 bytes


class FakeRegistry:
    """Deletes what the contract's prune would; records the listing it was handed; holds claims."""

    def __init__(self, fail: bool = False, captures=BUFFER, claims=()) -> None:
        self.calls: list[tuple[CaptureLimits, list[CaptureObject] | None]] = []
        self.fail = fail
        self.captures, self.claims, self.released = list(captures), list(claims), []

    def prune_captures(self, limits, now, captures=None):
        if self.fail:
            raise EndpointConnectionError(endpoint_url="http://s3.local")
        self.calls.append((limits, captures))
        return captures_to_prune(captures or [], limits, now.timestamp())

    def list_captures(self):
        if self.fail:
            raise EndpointConnectionError(endpoint_url="http://s3.local")
        return self.captures

    def list_claims(self):
        return self.claims

    def release_claim(self, run_id):
        self.released.append(run_id)

    def key(self, *parts: str) -> str:
        return "ns/chat/" + "/".join(parts)


@pytest.mark.parametrize(("params", "kept", "deleted"), [
    (CAPS, (), ["c0", "c1"]),  # over maxBufferSamples: oldest first
    (CaptureParams(max_buffer_bytes=2500), (), ["c0", "c1"]),
    (CaptureParams(retention_s=35 * 60), (), ["c0", "c1"]),  # 50 and 40 minutes old
    (CaptureParams(max_buffer_samples=400, max_buffer_bytes=4000), (), []),  # at the caps
    (CAPS, ("c0", "c1"), ["c2", "c3"]),  # claimed shards still count toward the caps: the next oldest go
    (CAPS, ("c0",), ["c1", "c2"]),
    (CaptureParams(retention_s=35 * 60), ("c0",), ["c1"]),  # past retention but claimed: kept
    (CaptureParams(retention_s=35 * 60), ("c0", "c1", "c2", "c3"), []),
])
def test_what_a_prune_deletes(params: CaptureParams, kept: tuple[str, ...], deleted: list[str]) -> None:
    due = captures_to_delete(BUFFER, params, {PREFIX + k for k in kept}, NOW.timestamp())
    assert [c.key.removeprefix(PREFIX) for c in due] == deleted


def test_nothing_due_makes_no_s3_call() -> None:
    registry = FakeRegistry()
    assert prune_capture_buffer(registry, BUFFER, CaptureParams(max_buffer_samples=4096), (), NOW) is None
    every = {c.key for c in BUFFER}
    assert prune_capture_buffer(registry, BUFFER, CaptureParams(retention_s=60), every, NOW) is None
    assert registry.calls == []


def test_the_registry_prunes_the_unclaimed_listing_under_shrunk_caps() -> None:
    registry = FakeRegistry()
    pruned = prune_capture_buffer(registry, BUFFER, CAPS, {PREFIX + "c0"}, NOW)
    assert pruned is not None
    assert (pruned.shards, pruned.samples, pruned.bytes, pruned.kept_claimed) == (2, 200, 2000, 1)
    [(limits, listing)] = registry.calls
    assert listing == list(BUFFER[1:])  # no second listing, and never the claimed shard
    assert (limits.max_samples, limits.max_bytes, limits.retention_s) == (150, 9_000, 3600)


def claim_body(run_id: str, keys: list[str], created_min_ago: float, timeout_s: float) -> dict:
    created = NOW.timestamp() - 60 * created_min_ago
    return {"claim_version": 1, "run_id": run_id, "created_at": created, "expires_at": created + timeout_s,
            "shards": [{"key": PREFIX + k, "last_modified": 0, "size": 1} for k in keys]}


class FakeCluster:
    def __init__(self, jobs: list[dict]) -> None:
        self._jobs = jobs

    def jobs(self, namespace: str, selector: str) -> list[dict]:
        assert "tide.dev/deployment=chat" in selector
        return self._jobs


def job(name: str, **status) -> dict:
    return {"metadata": {"name": name}, "status": status}


@pytest.mark.parametrize(("jobs", "running"), [
    ([job("chat-train-r1", active=1)], {"r1"}),
    ([job("chat-train-r1", succeeded=1)], set()),
    ([job("chat-train-r1", failed=1)], set()),
    ([job("chat-train-r1", conditions=[{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}])], set()),
    ([], set()),  # deleted (cancelled) Job
    ([job("other-train-r1", active=1)], set()),  # another deployment's namesake run
    ([job("chat-eval-r1", active=1)], {"r1"}),  # the run is a recall evaluation (issue 16): its claim holds too
    ([job("chat-eval-r1", succeeded=1)], set()),
])
def test_a_claim_holds_only_while_its_job_runs(jobs: list[dict], running: set[str]) -> None:
    claims = parse_claims([claim_body("r1", ["c0"], 1, 600)])
    assert running_runs("chat", "ns", claims, FakeCluster(jobs)) == running


def spec():
    return parse_spec({"target": {"model": "m", "revision": "r1"},
                       "control": {"capture": {"retention": "35m", "maxBufferSamples": 4096},
                                   "training": {"sampleThreshold": 10}},
                       "storage": {"s3": {"bucket": "tide-b"}}})


def test_the_timer_pass_releases_spent_claims_and_keeps_live_ones() -> None:
    registry = FakeRegistry(claims=[claim_body("r1", ["c0"], 5, 3600),  # running, within its deadline
                                    claim_body("r0", ["c1"], 90, 3600)])  # its Job is gone
    cluster = FakeCluster([job("chat-train-r1", active=1)])
    notes = enforce_retention("chat", "ns", spec(), registry, cluster, OperatorConfig(), NOW)
    assert registry.released == ["r0"]
    [(_, listing)] = registry.calls
    assert [c.key.removeprefix(PREFIX) for c in listing] == ["c1", "c2", "c3"]  # c0 claimed by r1
    assert [n.reason for n in notes] == ["CaptureClaimsReleased", "CapturesPruned"]
    assert "1 claimed shards kept for a running trainer" in notes[1].message


def test_a_claim_past_its_deadline_keeps_nothing() -> None:
    registry = FakeRegistry(claims=[claim_body("r1", ["c0"], 20, 600)])  # 10 minutes past its deadline
    cluster = FakeCluster([job("chat-train-r1", active=1)])  # hung, the Job controller has not caught up
    enforce_retention("chat", "ns", spec(), registry, cluster, OperatorConfig(), NOW)
    assert registry.released == ["r1"]
    [(_, listing)] = registry.calls
    assert listing[0].key == PREFIX + "c0"


def test_s3_down_makes_the_timer_pass_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    from tide_operator.passes import retention_timer

    monkeypatch.setattr(retention_timer, "make_registry", lambda *a, **k: FakeRegistry(fail=True))
    body = {"metadata": {"name": "chat", "namespace": "ns"},
            "spec": {"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide-b"}}}}
    assert retention_pass(body, FakeCluster([]), OperatorConfig(), NOW) == []


def test_an_invalid_spec_is_never_pruned(monkeypatch: pytest.MonkeyPatch) -> None:
    from tide_operator.passes import retention_timer

    def refuse(*_a, **_k):
        raise AssertionError("no registry for an invalid spec")

    monkeypatch.setattr(retention_timer, "make_registry", refuse)
    body = {"metadata": {"name": "chat", "namespace": "ns"}, "spec": {"target": {"model": "m"}}}
    assert retention_pass(body, FakeCluster([]), OperatorConfig(), NOW) == []


def test_the_newest_runs_come_first_by_counter_in_either_id_form() -> None:
    # The trainer's throughput is read from the newest reports: r10 after r9, whatever the prefix.
    assert _newest_first(["r9", "3fa9c2d1-r10", "seed", "3fa9c2d1-r2"]) == ["3fa9c2d1-r10", "r9", "3fa9c2d1-r2",
                                                                           "seed"]
