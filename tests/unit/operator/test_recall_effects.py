"""The draft pool's recall on the cluster (issue 16): the evaluation Job and its claim, its cancellation, and a
recalled draft's canary and promotion (a pooled drafts/vN pinned by its manifest, a pointer flip recorded as
``recalled``, no new version). Against a real S3 protocol server (moto's server mode) where the registry is."""

from __future__ import annotations

import hashlib
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from test_draft_convergence import LAUNCH_SOURCE, FakePod, effects
from test_promotion_records_pool import put_candidate

from tide_contracts.registry import CaptureObject, DraftRegistry, PromotedPointer
from tide_operator.api import parse_spec
from tide_operator.api.conditions import Reason
from tide_operator.config import OperatorConfig
from tide_operator.control import actions as act
from tide_operator.manifests.ownership import ChildConflict
from tide_operator.manifests.trainer import EVALUATION_DEADLINE_S
from tide_operator.passes import draft_pool_index
from tide_operator.passes.control_loop import DraftRefused, EffectError
from tide_operator.passes.effects import ClusterEffects
from tide_operator.passes.pod_convergence import CanaryPods

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "manifests"))
from manifest_fixtures import placement, spec_with

NOW = 1_000_000.0
RUN = "3fa9c2d1-r4"
SHIFT = NOW - 600


class ClaimingRegistry:
    """Captures before and after the shift, the claims written, and the pointer."""

    def __init__(self, pointer: PromotedPointer | None) -> None:
        self.pointer, self.claims = pointer, {}
        self.captures = [CaptureObject(f"llm/chat/captures/{name}", 1000, NOW - age, samples)
                         for name, age, samples in (("old", 900, 500), ("new-1", 300, 20), ("new-2", 100, 20))]

    def list_captures(self) -> list[CaptureObject]:
        return self.captures

    def put_claim(self, run_id: str, shards: list[CaptureObject], *, created_at: float, expires_at: float) -> str:
        self.claims[run_id] = ([s.key.rsplit("/", 1)[1] for s in shards], expires_at - created_at)
        return f"llm/chat/claims/{run_id}.json"

    def promoted(self) -> tuple[PromotedPointer | None, str | None]:
        return self.pointer, None


class JobCluster:
    def __init__(self, fail: Exception | None = None) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []
        self.fail = fail

    def create_owned(self, job: dict[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.created.append(job)

    def delete_owned_job(self, namespace: str, name: str, owner_uid: str) -> None:
        self.deleted.append((name, owner_uid))


def adopt(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"uid": "td-uid"}]
    return obj


def recall_effects(registry: Any, cluster: JobCluster, spec: Any = None) -> ClusterEffects:
    return ClusterEffects("chat", "llm", spec or spec_with(control={"draftPool": {"recallSampleThreshold": 32}}),
                          placement(), OperatorConfig(), cluster, None, registry, adopt)  # type: ignore[arg-type]


def pointer_to(version: str) -> PromotedPointer:
    return PromotedPointer(version=version, run_id="3fa9c2d1-r2", target_revision="5f1c0e2",
                           updated_at="2026-12-03T00:00:00Z", manifest_sha256="a" * 64)


def flags(job: dict[str, Any], flag: str) -> list[str]:
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_launch_recall_claims_the_shift_and_creates_the_evaluation_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tide_operator.passes.recall_effects.time", SimpleNamespace(time=lambda: NOW))
    registry, cluster = ClaimingRegistry(pointer_to("v3")), JobCluster()
    recall_effects(registry, cluster).launch_recall(act.LaunchRecall(RUN, ("v1", "v2"), "RecallEvaluating", "m",
                                                                     captured_since=SHIFT))
    # Only the shift's shards (40 >= recallSampleThreshold 32; training's 2048 would pull in "old"), expiring
    # with the Job's deadline.
    assert registry.claims[RUN] == (["new-1", "new-2"], EVALUATION_DEADLINE_S)
    (job,) = cluster.created
    assert job["metadata"]["name"] == f"chat-eval-{RUN}"
    assert job["metadata"]["labels"]["tide.dev/job-kind"] == "evaluation"
    assert job["metadata"]["ownerReferences"] == [{"uid": "td-uid"}]
    assert job["spec"]["activeDeadlineSeconds"] == EVALUATION_DEADLINE_S
    assert flags(job, "--shard-claim") == [f"s3://tide/llm/chat/claims/{RUN}.json"]
    assert flags(job, "--served-draft") == ["v3=s3://tide/llm/chat/drafts/v3"]
    assert flags(job, "--pooled-drafts") == ["v1=s3://tide/llm/chat/drafts/v1", "v2=s3://tide/llm/chat/drafts/v2"]
    assert flags(job, "--captured-since") == [repr(SHIFT)]


@pytest.mark.parametrize(("initial", "served"), [("s3://drafts/llama/eagle3-base", ["initial=s3://drafts/llama/eagle3-base"]),
                                                 (None, [])])
def test_before_any_promotion_the_served_draft_is_the_launch_draft_or_none(initial: str | None,
                                                                           served: list[str]) -> None:
    spec = spec_with(draft={"initial": initial}, control={"draftPool": {"recallSampleThreshold": 32}})
    registry, cluster = ClaimingRegistry(None), JobCluster()
    recall_effects(registry, cluster, spec).launch_recall(act.LaunchRecall(RUN, ("v1",), "R", "m",
                                                                           captured_since=SHIFT))
    (job,) = cluster.created
    assert flags(job, "--served-draft") == served


@pytest.mark.parametrize(("versions", "fail", "reason", "named"), [
    (("v1", "../x"), None, Reason.TRAINER_JOB_INVALID, "'../x'"),  # never a name outside the pool's
    (("v1",), ChildConflict([]), Reason.CHILD_CONFLICT, f"recall evaluation Job {RUN}"),
])
def test_a_job_that_cannot_be_made_is_an_effect_error_naming_why(versions: tuple[str, ...], fail: Exception | None,
                                                                 reason: str, named: str) -> None:
    cluster = JobCluster(fail)
    with pytest.raises(EffectError) as raised:
        recall_effects(ClaimingRegistry(None), cluster).launch_recall(act.LaunchRecall(RUN, versions, "R", "m"))
    assert raised.value.reason == reason
    assert named in str(raised.value)
    assert cluster.created == []


def test_cancel_deletes_the_runs_job_of_either_kind() -> None:
    cluster = JobCluster()
    recall_effects(ClaimingRegistry(None), cluster).cancel_training(act.CancelTraining(RUN, "WorkloadShift", "m"))
    assert cluster.deleted == [(f"chat-train-{RUN}", "td-uid"), (f"chat-eval-{RUN}", "td-uid")]


# ---- a recalled draft's canary and promotion, against the registry -----------------------------------

@pytest.fixture
def registry(s3_endpoint: str) -> DraftRegistry:
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test", config=Config(s3={"addressing_style": "path"}))
    bucket = f"tide-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    reg = DraftRegistry(client, bucket, "team/chat", sse="AES256")
    for n in (1, 2):  # v1 (code), then v2 (prose) serves
        put_candidate(reg, f"3fa9c2d1-r{n}")
        reg.promote(f"3fa9c2d1-r{n}", target_revision="r1", tokenizer_hash=None, now=datetime.now(UTC))
    draft_pool_index.forget("team", "chat")
    return reg


def manifest_sha(reg: DraftRegistry, version: str) -> str:
    body = reg.client.get_object(Bucket=reg.bucket, Key=reg.key("drafts", version, "manifest.json"))["Body"].read()
    return hashlib.sha256(body).hexdigest()


V1_SOURCE = "s3://tide/team/chat/drafts/v1"


def test_a_recalled_canary_loads_the_pooled_version_on_exactly_its_pods(registry: DraftRegistry) -> None:
    pods = {"chat-a": FakePod("v2"), "chat-b": FakePod("v2")}
    effects(pods, registry).start_canary(act.StartCanary("v1", 1, "DraftRecalled", "m", ("chat-a",), recalled=True))
    assert pods["chat-a"].loads == [(V1_SOURCE, "v1", manifest_sha(registry, "v1"))]
    assert pods["chat-b"].loads == []


def test_a_recalled_version_gone_from_the_registry_is_refused(registry: DraftRegistry) -> None:
    pods = {"chat-a": FakePod("v2")}
    with pytest.raises(DraftRefused) as refused:
        effects(pods, registry).start_canary(act.StartCanary("v9", 1, "R", "m", ("chat-a",), recalled=True))
    assert refused.value.reason == Reason.UNKNOWN_VERSION
    assert pods["chat-a"].loads == []


def test_convergence_keeps_a_recalled_canarys_pods_on_the_pooled_version(registry: DraftRegistry) -> None:
    pods = {"chat-a": FakePod("v2"), "chat-b": FakePod("v2")}
    swapped = effects(pods, registry).converge_drafts(CanaryPods("v1", ("chat-a",), recalled=True))
    assert swapped == ["chat-a: draft v2 -> v1"]
    assert pods["chat-a"].loads == [(V1_SOURCE, "v1", manifest_sha(registry, "v1"))]


def test_a_recalled_promotion_flips_the_pointer_records_it_and_serves_every_pod(registry: DraftRegistry) -> None:
    pods = {"chat-a": FakePod("v1"), "chat-b": FakePod("v2")}
    action = act.Promote("v1", "CanarySuccessful", "canary 2.41 vs control 1.93", recalled=True)
    note = effects(pods, registry).promote(action)
    assert note is None
    pointer, _ = registry.promoted()
    assert pointer is not None
    assert (pointer.version, pointer.manifest_sha256) == ("v1", manifest_sha(registry, "v1"))
    assert registry.list_versions() == ["v1", "v2"]  # it keeps its version: no copy
    last = registry.history()[-1]
    assert (last.action, last.version, last.previous, last.manual) == ("recalled", "v1", "v2", False)
    assert "canary 2.41 vs control 1.93" in last.reason
    assert registry.previous_version() == "v2"  # a rollback after a recall goes back to the draft before it
    pool, etag = registry.pool()
    assert pool is not None
    assert [e.version for e in pool.entries] == ["v1"]
    # Remembered: the next pass does not record it again.
    assert draft_pool_index.note_served(registry, effects(pods, registry).spec, ("team", "chat"), "v1",
                                        datetime.now(UTC)) == []
    assert registry.pool()[1] == etag
    assert pods["chat-a"].loads == []  # already on it (the canary pod)
    assert pods["chat-b"].loads == [(V1_SOURCE, "v1", manifest_sha(registry, "v1"))]


def test_a_retried_recalled_promotion_only_serves(registry: DraftRegistry) -> None:
    pods = {"chat-a": FakePod("v2")}
    action = act.Promote("v1", "CanarySuccessful", "m", recalled=True)
    effects(pods, registry).promote(action)
    effects(pods, registry).promote(action)
    assert [e.action for e in registry.history()] == ["promote", "promote", "recalled"]


# ---- the launch draft (initial) recalled: it has no drafts/ object, the pods load it as they launched -------

def test_a_recalled_launch_draft_canary_loads_the_launch_source_unpinned(registry: DraftRegistry) -> None:
    pods = {"chat-a": FakePod("v2"), "chat-b": FakePod("v2")}
    effects(pods, registry).start_canary(act.StartCanary("initial", 1, "DraftRecalled", "m", ("chat-a",),
                                                         recalled=True))
    assert pods["chat-a"].loads == [(LAUNCH_SOURCE, None, None)]
    assert pods["chat-a"].status().draft.version == "initial"
    assert pods["chat-b"].loads == []
    # Convergence keeps it there while the canary runs (and leaves the others on the pointer's v2).
    assert effects(pods, registry).converge_drafts(CanaryPods("initial", ("chat-a",), recalled=True)) == []


def test_a_recalled_launch_draft_promotion_points_to_initial_and_serves_it_everywhere(
        registry: DraftRegistry) -> None:
    pods = {"chat-a": FakePod("initial"), "chat-b": FakePod("v2")}
    effects(pods, registry).promote(act.Promote("initial", "CanarySuccessful", "canary 2.80 vs control 1.31",
                                                recalled=True))
    pointer, _ = registry.promoted()
    assert pointer is not None
    assert (pointer.version, pointer.manifest_sha256, pointer.target_revision) == ("initial", None, "r1")
    assert registry.list_versions() == ["v1", "v2"]  # nothing copied, no new version
    last = registry.history()[-1]
    assert (last.action, last.version, last.previous) == ("recalled", "initial", "v2")
    pool, _ = registry.pool()
    assert pool is not None
    assert [e.version for e in pool.entries] == ["initial"]
    assert pods["chat-a"].loads == []
    assert pods["chat-b"].loads == [(LAUNCH_SOURCE, None, None)]
    # A pod that starts later, or one still on v2, converges to the launch draft, not to drafts/initial.
    late = {"chat-c": FakePod("v2")}
    assert effects(late, registry).converge_drafts(None) == ["chat-c: draft v2 -> initial"]
    assert late["chat-c"].loads == [(LAUNCH_SOURCE, None, None)]
    # The next promotion records where it came from, so a rollback goes back to the launch draft.
    put_candidate(registry, "3fa9c2d1-r5")
    registry.promote("3fa9c2d1-r5", target_revision="r1", tokenizer_hash=None, now=datetime.now(UTC))
    assert registry.previous_version() == "initial"
    effects(late, registry).flip_pointer(act.FlipPointer(None, True, "RollbackRequested", "by hand"))
    assert registry.promoted()[0].version == "initial"  # type: ignore[union-attr]


def test_training_after_the_launch_draft_was_recalled_starts_from_the_launch_draft(
        registry: DraftRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.point_to("initial", target_revision="r1", now=datetime.now(UTC), reason="recalled", action="recalled")
    parents: list[str | None] = []
    monkeypatch.setattr("tide_operator.passes.effects.claim_shards", lambda *a, **k: 600)
    monkeypatch.setattr("tide_operator.passes.effects.build_trainer_job",
                        lambda *a, parent_draft, **k: parents.append(parent_draft) or {"metadata": {}})
    fx = effects({}, registry)
    fx.cluster, fx.adopt = JobCluster(), adopt  # type: ignore[assignment]
    fx.launch_training(act.LaunchTraining("3fa9c2d1-r6", "ShiftPersists", "m"))
    assert parents == [None]  # the trainer's default: spec.draft.initial, never drafts/initial


def test_initial_is_refused_when_the_spec_names_no_launch_draft(registry: DraftRegistry) -> None:
    fx = effects({"chat-a": FakePod("v2")}, registry)
    fx.spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}}})
    with pytest.raises(DraftRefused) as refused:
        fx.flip_pointer(act.FlipPointer("initial", False, "PromoteRequested", "by hand"))
    assert refused.value.reason == Reason.UNKNOWN_VERSION
    assert "spec.draft.initial" in str(refused.value)
    assert registry.promoted()[0].version == "v2"  # type: ignore[union-attr]


def test_the_first_promotion_rolls_back_to_the_launch_draft_and_a_user_can_promote_it_by_name(
        s3_endpoint: str) -> None:
    """Before, the history's first promotion named no previous version: `tide rollback` was refused, and
    `tide promote initial` was not a version. Both flip the pointer to the launch draft now."""
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test", config=Config(s3={"addressing_style": "path"}))
    bucket = f"tide-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    registry = DraftRegistry(client, bucket, "team/chat")
    put_candidate(registry, "3fa9c2d1-r1")
    registry.promote("3fa9c2d1-r1", target_revision="r1", tokenizer_hash=None, now=datetime.now(UTC))
    pods = {"chat-a": FakePod("v1")}
    before, after = effects(pods, registry).flip_pointer(act.FlipPointer(None, True, "RollbackRequested", "by hand"))
    assert (before, after) == ("v1", "initial")
    assert pods["chat-a"].loads == [(LAUNCH_SOURCE, None, None)]
    last = registry.history()[-1]
    assert (last.action, last.version, last.previous, last.manual) == ("rollback", "initial", "v1", True)
    before, after = effects(pods, registry).flip_pointer(act.FlipPointer("v1", False, "PromoteRequested", "by hand"))
    assert (before, after) == ("initial", "v1")
    before, after = effects(pods, registry).flip_pointer(act.FlipPointer("initial", False, "PromoteRequested", "x"))
    assert (before, after) == ("v1", "initial")
