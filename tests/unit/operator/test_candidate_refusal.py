"""A candidate whose files are unfit is rolled back at once; S3 trouble is retried with the pointer untouched.

Fleet: a pod's checksum/manifest/target refusal is DraftRefused, anything else a plain EffectError.
Effects: the registry's ChecksumMismatch is DraftRefused before the pointer moves; S3 unreachable
is a retry; a refusal after the pointer moved is a retry too (promotion is idempotent per run).
Control pass: DraftRefused on StartCanary or Promote rolls the candidate back (RollBack, history,
a Warning Event, lastDecision naming the reason); other failures keep the old state.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tide_contracts.registry import DraftRegistry, FileEntry, Manifest, manifest_json
from tide_contracts.serving_control import ErrorCode, ServingControlError
from tide_operator.adapters.fleet import Fleet, ServingPod
from tide_operator.api import parse_spec
from tide_operator.api.conditions import Reason
from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryAnalysis, CanaryParams, PodGroupMetrics
from tide_operator.control.lifecycle import LifecycleState
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.policy import Observation, PolicyParams, PolicyState
from tide_operator.passes.control_loop import DraftRefused, EffectError, SensorReading, control_pass
from tide_operator.passes.effects import ClusterEffects
from tide_operator.passes.serving_status import StatusDraft

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
REV = "r1"


# -- fleet ------------------------------------------------------------------------------------------
class RefusingPod:
    def __init__(self, code: ErrorCode | None) -> None:
        self.code = code

    def load_draft(self, request: Any) -> None:
        if self.code is not None:
            raise ServingControlError(422, self.code, f"{request.source}/model.safetensors: sha256 differs")


def fleet_answering(*codes: ErrorCode | None) -> Fleet:
    pods = [ServingPod(f"chat-vllm-{i}", f"10.0.0.{i}", True) for i in range(len(codes))]
    by_url = {f"http://{p.ip}:8000": RefusingPod(c) for p, c in zip(pods, codes, strict=True)}
    return Fleet(pods, 8000, "token", client_factory=lambda url, token, timeout_s: by_url[url])


@pytest.mark.parametrize(("codes", "reason"), [
    ((None, ErrorCode.CHECKSUM_MISMATCH), "ChecksumMismatch"),
    ((ErrorCode.MANIFEST_INVALID,), "ManifestInvalid"),
    ((ErrorCode.TARGET_REVISION_MISMATCH,), "IncompatibleDraft"),
    ((ErrorCode.SOURCE_UNAVAILABLE, ErrorCode.CHECKSUM_MISMATCH), "ChecksumMismatch"),
])
def test_a_pod_refusing_the_drafts_files_is_a_draft_refusal(codes: tuple, reason: str) -> None:
    with pytest.raises(DraftRefused) as refused:
        fleet_answering(*codes).load_draft("s3://b/ns/chat/candidates/r1", None)
    assert refused.value.reason == reason
    assert "chat-vllm-" in str(refused.value)


def test_a_pod_that_cannot_reach_the_source_is_retried_not_refused() -> None:
    with pytest.raises(EffectError) as failed:
        fleet_answering(ErrorCode.SOURCE_UNAVAILABLE).load_draft("s3://b/ns/chat/candidates/r1", None)
    assert not isinstance(failed.value, DraftRefused)
    assert failed.value.reason == Reason.SERVING_PODS_UNREACHABLE  # Degraded names the pods, not S3


# -- effects (real registry on the loopback S3 server) ----------------------------------------------
class RecordingFleet:
    def __init__(self, refuse: bool = False) -> None:
        self.loads: list[tuple[str, str | None]] = []
        self.manifest_checksums: list[str | None] = []
        self.refuse = refuse
        self.pods: list[ServingPod] = []

    def load_draft(self, source: str, version: str | None, pods: Any = None,
                   manifest_sha256: str | None = None) -> None:
        if self.refuse:
            raise DraftRefused("ChecksumMismatch", f"{source}: sha256 differs")
        self.loads.append((source, version))
        self.manifest_checksums.append(manifest_sha256)

    def statuses(self, ready_only: bool = False) -> dict[str, Any]:
        return {}  # no pod reports a draft: none is skipped


def candidate(registry: DraftRegistry, run_id: str, *, corrupt: bool = False) -> None:
    files = {"config.json": b'{"arch": "eagle3"}', "model.safetensors": run_id.encode() * 500}
    for name, body in files.items():
        stored = body[:-1] + b"X" if corrupt and name == "model.safetensors" else body
        registry.client.put_object(Bucket=registry.bucket, Key=registry.key("candidates", run_id, name), Body=stored)
    manifest = Manifest(kind="candidate", run_id=run_id, created_at=NOW.isoformat(), target_revision=REV,
                        files={n: FileEntry(sha256=hashlib.sha256(b).hexdigest(), bytes=len(b))
                               for n, b in files.items()})
    registry.client.put_object(Bucket=registry.bucket, Key=registry.key("candidates", run_id, "manifest.json"),
                               Body=manifest_json(manifest).encode())


def effects_on(registry: DraftRegistry, fleet: RecordingFleet) -> ClusterEffects:
    spec = parse_spec({"target": {"model": "m", "revision": REV}, "storage": {"s3": {"bucket": registry.bucket}}})
    return ClusterEffects("chat", "ns", spec, None, None, None, fleet, registry, None)  # type: ignore[arg-type]


@pytest.fixture
def registry(s3: Any) -> DraftRegistry:
    bucket = f"tide-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    return DraftRegistry(s3, bucket, "ns/chat")


def drafts(registry: DraftRegistry) -> list[str]:
    return registry._list(registry.key("drafts") + "/")


def test_a_corrupted_candidate_is_refused_before_anything_is_written(registry: DraftRegistry) -> None:
    candidate(registry, "r1", corrupt=True)
    fleet = RecordingFleet()
    with pytest.raises(DraftRefused) as refused:
        effects_on(registry, fleet).promote(act.Promote("r1", "CanarySuccessful", "successful=3"))
    assert refused.value.reason == "ChecksumMismatch"
    assert "candidates/r1/model.safetensors" in str(refused.value)
    assert registry.promoted() == (None, None)
    assert drafts(registry) == []
    assert fleet.loads == []  # no pod was asked to load anything


def test_s3_unreachable_mid_promotion_is_retried_with_the_pointer_untouched(registry: DraftRegistry) -> None:
    candidate(registry, "r1")
    down = boto3.client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                        aws_access_key_id="a", aws_secret_access_key="b",
                        config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    with pytest.raises(EffectError) as failed:
        effects_on(DraftRegistry(down, registry.bucket, registry.prefix), RecordingFleet()).promote(
            act.Promote("r1", "CanarySuccessful", "successful=3"))
    assert not isinstance(failed.value, DraftRefused)
    assert registry.promoted() == (None, None)
    assert drafts(registry) == []


def test_a_refusal_after_the_pointer_moved_is_retried_and_the_retry_makes_no_second_version(
        registry: DraftRegistry) -> None:
    candidate(registry, "r1")
    with pytest.raises(EffectError) as failed:
        effects_on(registry, RecordingFleet(refuse=True)).promote(act.Promote("r1", "CanarySuccessful", ""))
    assert not isinstance(failed.value, DraftRefused)  # v1 is promoted: never roll it back as a candidate
    fleet = RecordingFleet()
    effects_on(registry, fleet).promote(act.Promote("r1", "CanarySuccessful", ""))
    assert fleet.loads == [(f"s3://{registry.bucket}/ns/chat/drafts/v1", "v1")]
    # Pods are told the manifest the operator wrote, so a manifest swapped in drafts/v1 later is refused.
    written = registry.client.get_object(Bucket=registry.bucket, Key=registry.key("drafts", "v1", "manifest.json"))
    assert fleet.manifest_checksums == [hashlib.sha256(written["Body"].read()).hexdigest()]
    assert registry.promoted()[0].manifest_sha256 == fleet.manifest_checksums[0]
    assert registry.list_versions() == ["v1"]
    assert [h.action for h in registry.history()] == ["promote"]


# -- the control pass -------------------------------------------------------------------------------
PARAMS = PolicyParams(target_revision=REV, canary=CanaryParams(analysis_window_s=30, measurement_interval_s=6,
                                                               min_promotion_interval_s=0))
CANARY_WINS = Observation(per_position_acceptance=(0.7,), acceptance_length=2.2, batch_size=4,
                          acceptance_samples=1000, promoted_version="initial", buffer_samples=10,
                          canary=PodGroupMetrics(2.8, 100.0), control=PodGroupMetrics(2.2, 100.0))


class ScriptedEffects:
    """Every action succeeds except the scripted failures (one per action type)."""

    def __init__(self, failures: dict[type, EffectError]) -> None:
        self.failures, self.done = failures, []

    def _do(self, action: act.Action) -> None:
        if type(action) in self.failures:
            raise self.failures[type(action)]
        self.done.append(action)

    set_speculation = set_capture = launch_training = launch_recall = cancel_training = _do
    start_canary = promote = roll_back = serve_draft = invalidate = _do

    def converge(self, speculation: bool, capture: bool, bands: object = None, canary: object = None,
                 acceptance: object = None) -> list[str]:
        return []

    def converge_drafts(self, canary: object) -> list[str]:
        return []


def status_with(lifecycle: LifecycleState) -> StatusDraft:
    state = PolicyState(lifecycle=lifecycle)
    return StatusDraft(TideDeploymentStatus(phase=Phase.CANARY, control_state=state.to_dict()), generation=1, now=NOW)


def canary_done() -> LifecycleState:
    return LifecycleState(phase=LifecyclePhase.CANARY, phase_since=0.0, target_revision=REV, capture_enabled=True,
                          run_counter=1, candidate="r1", candidate_acceptance_length=2.6,
                          canary=CanaryAnalysis(started_at=0.0, successful=4, measured_at=24.0,
                                                consecutive_successes=4, length_gains=(2.8 / 2.2 - 1,) * 4))


def evaluating() -> LifecycleState:
    return LifecycleState(phase=LifecyclePhase.EVALUATING, phase_since=0.0, target_revision=REV,
                          capture_enabled=True, run_counter=1, candidate="r1", candidate_acceptance_length=2.6)


CHECKSUM = DraftRefused("ChecksumMismatch", "ns/chat/candidates/r1/model.safetensors: sha256 1f.. (999 bytes) "
                                            "does not match the manifest's 9a.. (1000 bytes); not promoting")


@pytest.mark.parametrize(("lifecycle", "refused_action"), [(canary_done, act.Promote),
                                                           (evaluating, act.StartCanary)])
def test_a_refused_candidate_is_rolled_back_with_the_reason_in_status(lifecycle, refused_action) -> None:
    draft = status_with(lifecycle())
    effects = ScriptedEffects({refused_action: CHECKSUM})
    state = control_pass(draft, PARAMS, SensorReading(CANARY_WINS), effects, now=31.0)

    rollbacks = [a for a in effects.done if isinstance(a, act.RollBack)]
    assert [(a.candidate, a.reason) for a in rollbacks] == [("r1", "ChecksumMismatch")]
    assert rollbacks[0].message == str(CHECKSUM)
    assert not any(isinstance(a, act.Promote) for a in effects.done)
    assert (state.lifecycle.phase, state.lifecycle.candidate, state.lifecycle.rollbacks) == (
        LifecyclePhase.ROLLED_BACK, None, 1)
    assert draft.status.control_state == state.to_dict()
    decision = draft.status.last_decision
    assert decision is not None
    assert (decision.action, decision.reason) == ("RollBack", "ChecksumMismatch")
    warnings = [e for e in draft.events if e.type == "Warning"]
    assert [e.reason for e in warnings] == ["ChecksumMismatch"]
    assert next(c for c in draft.status.conditions if c.type == "Degraded").status == "False"
    promoting = next(c for c in draft.status.conditions if c.type == "Promoting")
    assert (promoting.status, promoting.reason) == ("False", "ChecksumMismatch")
    assert promoting.message == f"r1 rolled back: {CHECKSUM}"


def test_s3_trouble_while_promoting_keeps_the_canary_and_says_storage() -> None:
    draft = status_with(canary_done())
    effects = ScriptedEffects({act.Promote: EffectError("promote r1: Could not connect to the endpoint URL")})
    state = control_pass(draft, PARAMS, SensorReading(CANARY_WINS), effects, now=31.0)
    assert state.lifecycle == canary_done()  # retried next pass, nothing forgotten
    assert not any(isinstance(a, act.RollBack) for a in effects.done)
    degraded = next(c for c in draft.status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "StorageUnreachable")
    assert "Promote: promote r1: Could not connect" in degraded.message


def test_a_sensor_reading_without_s3_is_reported_as_storage_unreachable() -> None:
    draft = status_with(canary_done())
    reading = SensorReading(None, "S3 tide: Could not connect to the endpoint URL",
                            error_reason="StorageUnreachable")
    control_pass(draft, PARAMS, reading, ScriptedEffects({}), now=31.0)
    degraded = next(c for c in draft.status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "StorageUnreachable")


def test_the_promoting_condition_keeps_how_the_last_canary_ended() -> None:
    draft = status_with(canary_done())
    control_pass(draft, PARAMS, SensorReading(CANARY_WINS), ScriptedEffects({act.Promote: CHECKSUM}), now=31.0)
    for now in (36.0, 41.0):  # RolledBack -> Collecting -> ... : later passes decide other things
        draft = StatusDraft(draft.status, generation=1, now=NOW)
        control_pass(draft, PARAMS, SensorReading(CANARY_WINS), ScriptedEffects({}), now=now)
    promoting = next(c for c in draft.status.conditions if c.type == "Promoting")
    assert (promoting.status, promoting.reason) == ("False", "ChecksumMismatch")

    promoted = status_with(canary_done())
    control_pass(promoted, PARAMS, SensorReading(CANARY_WINS), ScriptedEffects({}), now=31.0)
    promoting = next(c for c in promoted.status.conditions if c.type == "Promoting")
    assert (promoting.status, promoting.reason) == ("False", "CanarySuccessful")
    assert promoting.message.startswith("r1 promoted: successful=5")
