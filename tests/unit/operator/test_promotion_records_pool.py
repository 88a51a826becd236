"""A promotion joins the draft pool's index (issue 16) with its manifest's signature, bounded by
spec.control.draftPool.maxDrafts, the pin kept; a failure to write pool.json is a Warning Event and never
fails or undoes the promotion (pointer, drafts/vN, pods all move as before). Against a real S3 protocol
server (moto's server mode) where the registry is involved."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.config import Config
from test_draft_convergence import FakePod, effects

from tide_contracts.draft_pool import DomainSignature
from tide_contracts.registry import DraftRegistry, FileEntry, Manifest, manifest_json
from tide_operator.api import parse_spec
from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryAnalysis, CanaryParams, PodGroupMetrics
from tide_operator.control.cost_model import expected_acceptance_length
from tide_operator.control.lifecycle import LifecycleState
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide
from tide_operator.control.speculation import SpeculationState
from tide_operator.passes.control_loop import SensorReading, control_pass
from tide_operator.passes.draft_pool_index import DRAFT_POOL_NOT_UPDATED, DRAFT_POOL_TRIMMED, record_promotion
from tide_operator.passes.serving_status import EventNote, StatusDraft

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
CODE = DomainSignature(mean=(1.0, 0.0), std=(1.0, 0.5), tokens=400, projection="p1")


@pytest.fixture
def registry(s3_endpoint: str) -> DraftRegistry:
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test", config=Config(s3={"addressing_style": "path"}))
    bucket = f"tide-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return DraftRegistry(client, bucket, "team/chat", sse="AES256")


def put_candidate(reg: DraftRegistry, run_id: str, signature: DomainSignature | None = CODE) -> None:
    body = run_id.encode() * 100
    reg.client.put_object(Bucket=reg.bucket, Key=reg.key("candidates", run_id, "model.safetensors"), Body=body)
    manifest = Manifest(kind="candidate", run_id=run_id, created_at=NOW.isoformat(), target_revision="r1",
                        tokenizer_hash="tok-1", signature=signature,
                        files={"model.safetensors": FileEntry(sha256=hashlib.sha256(body).hexdigest(),
                                                              bytes=len(body))})
    reg.client.put_object(Bucket=reg.bucket, Key=reg.key("candidates", run_id, "manifest.json"),
                          Body=manifest_json(manifest).encode())


def test_a_promotion_lists_the_draft_in_the_pool_with_its_signature(registry: DraftRegistry) -> None:
    put_candidate(registry, "3fa9c2d1-r1")
    pods = {"chat-a": FakePod("initial")}
    note = effects(pods, registry).promote(act.Promote("3fa9c2d1-r1", "CanarySuccessful", "beat the control"))
    assert note is None
    pool, _ = registry.pool()
    assert pool is not None
    assert (pool.target_revision, pool.tokenizer_hash) == ("r1", "tok-1")
    entry = pool.entry("v1")
    assert entry is not None
    assert entry.signature == CODE
    assert [load[1] for load in pods["chat-a"].loads] == ["v1"]


def test_a_pool_that_cannot_be_written_leaves_the_promotion_standing(registry: DraftRegistry) -> None:
    registry.client.put_object(Bucket=registry.bucket, Key=registry.key("pool.json"), Body=b"not json")
    put_candidate(registry, "3fa9c2d1-r1")
    pods = {"chat-a": FakePod("initial")}
    note = effects(pods, registry).promote(act.Promote("3fa9c2d1-r1", "CanarySuccessful", "beat the control"))
    assert note is not None
    assert (note.type, note.reason) == ("Warning", DRAFT_POOL_NOT_UPDATED)
    assert "v1 is promoted" in note.message
    pointer, _ = registry.promoted()
    assert pointer is not None
    assert pointer.version == "v1"  # the pointer moved, the draft is stored, the history says so
    assert registry.draft_manifest("v1").signature == CODE
    assert [h.action for h in registry.history()] == ["promote"]
    assert [load[1] for load in pods["chat-a"].loads] == ["v1"]  # and the pods serve it


class UnreachablePool(DraftRegistry):
    def record_served(self, *args: Any, **kwargs: Any) -> list[str]:
        raise OSError("connection reset by peer")


def test_an_unreachable_pool_is_a_warning_not_an_effect_error(registry: DraftRegistry) -> None:
    put_candidate(registry, "3fa9c2d1-r1", signature=None)  # a draft without a signature is listed too
    unreachable = UnreachablePool(registry.client, registry.bucket, registry.prefix)
    note = effects({"chat-a": FakePod("initial")}, unreachable).promote(act.Promote("3fa9c2d1-r1", "C", "m"))
    assert note is not None
    assert "connection reset" in note.message
    assert registry.promoted()[0] is not None


def test_the_bound_comes_from_the_spec_and_the_pin_never_leaves(registry: DraftRegistry) -> None:
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}},
                       "control": {"draftPool": {"maxDrafts": 2}, "draftPin": "v1"}})
    notes = []
    for n in (1, 2, 3):
        put_candidate(registry, f"run-{n}")
        pointer = registry.promote(f"run-{n}", target_revision="r1", tokenizer_hash=None, now=NOW)
        notes.append(record_promotion(registry, spec, pointer, NOW.replace(minute=n)))
    assert notes[:2] == [None, None]
    assert notes[2] is not None
    assert (notes[2].type, notes[2].reason) == ("Normal", DRAFT_POOL_TRIMMED)
    assert notes[2].message.startswith("v2 left the draft pool's index")
    pool, _ = registry.pool()
    assert pool is not None
    assert [e.version for e in pool.entries] == ["v1", "v3"]
    assert registry.list_versions() == ["v1", "v2", "v3"]  # leaving the index deletes no draft


# ---------------------------------------------------------------- the control pass reports it

CONTROL_A, CANARY_A = 0.45, 0.52


class PromotingEffects:
    """Every effect succeeds; promote reports that the pool's index was not updated."""

    def __init__(self) -> None:
        self.done: list[act.Action] = []

    def _do(self, action: act.Action) -> None:
        self.done.append(action)

    set_speculation = set_capture = launch_training = cancel_training = _do
    start_canary = roll_back = serve_draft = invalidate = _do

    def promote(self, action: act.Promote) -> EventNote:
        self.done.append(action)
        return EventNote("Warning", DRAFT_POOL_NOT_UPDATED, "v2 is promoted, but pool.json does not list it: 503")

    def converge(self, *args: object, **kwargs: object) -> list[str]:
        return []

    def converge_drafts(self, canary: object) -> list[str]:
        return []


def observe(canary: PodGroupMetrics) -> Observation:
    control = PodGroupMetrics(expected_acceptance_length(CONTROL_A, 3), 100.0)
    return Observation(per_position_acceptance=(CONTROL_A,), batch_size=16, acceptance_samples=5000,
                       promoted_version="v1", canary=canary, control=control, ready_pods=("pod-0", "pod-1"))


def test_the_pass_reports_the_pools_warning_and_keeps_the_promotion() -> None:
    params = PolicyParams(target_revision="r1", canary=CanaryParams(analysis_window_s=300,
                                                                     consecutive_success_limit=0))
    lifecycle = LifecycleState(phase=LifecyclePhase.CANARY, phase_since=0.0, target_revision="r1", run_counter=1,
                               candidate="run-1", candidate_acceptance_length=2.2, capture_enabled=True,
                               canary=CanaryAnalysis(started_at=0.0), canary_pods=("pod-0",))
    state = PolicyState(speculation=SpeculationState(enabled=True, changed_at=-3600.0), lifecycle=lifecycle,
                        acceptance_estimate=CONTROL_A)
    better = observe(PodGroupMetrics(expected_acceptance_length(CANARY_A, 3), 100.0))
    for now in range(30, 271, 30):  # the window's first measurements
        _, state = decide(better, state, params, float(now))
    draft = StatusDraft(TideDeploymentStatus(phase=Phase.CANARY, control_state=state.to_dict()), generation=1,
                        now=NOW)
    fx = PromotingEffects()
    after = control_pass(draft, params, SensorReading(better), fx, now=300.0)
    assert any(isinstance(a, act.Promote) for a in fx.done)
    assert after.lifecycle.phase is not LifecyclePhase.CANARY  # the promotion is committed
    degraded = next(c for c in draft.status.conditions if c.type == "Degraded")
    assert degraded.status == "False"
    pool_events = [(e.type, e.reason, e.action) for e in draft.events if e.reason == DRAFT_POOL_NOT_UPDATED]
    assert pool_events == [("Warning", DRAFT_POOL_NOT_UPDATED, "")]  # not counted as a decision
    assert not [e for e in draft.events if e.reason == "PodsRolledForSpeculation"]
