"""Start without a draft: the init Job (built like a trainer Job, run once per target revision), the
pods rolled with the bootstrap head at K=0, and the control pass held until then (the effects:
test_bootstrap_effects.py)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tide_operator.api.conditions import ConditionType, Reason
from tide_operator.api.status import TideDeploymentStatus
from tide_operator.config import OperatorConfig
from tide_operator.control.bootstrap import InitJob, bootstrap_step, init_job_state
from tide_operator.manifests import names
from tide_operator.manifests.ownership import ChildConflict, Conflict
from tide_operator.manifests.serving import (
    BOOTSTRAP_DRAFT_ANNOTATION,
    OFF_BANDS,
    build_serving_deployment,
    full_bands,
    launch_bands_with,
    render_serving_config,
)
from tide_operator.manifests.trainer import BOOTSTRAP_RETRIES, bootstrap_location, build_bootstrap_job
from tide_operator.passes.bootstrap_draft import bootstrap_pending, ensure_bootstrap
from tide_operator.passes.serving_status import StatusDraft

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "manifests"))
from manifest_fixtures import BASE, placement, spec_with

NOW = datetime(2026, 12, 3, tzinfo=UTC)
HEAD = "s3://tide/llm/chat/bootstrap/" + names.bootstrap_key("5f1c0e2")


def bare_spec() -> Any:
    spec = spec_with()
    return spec.model_copy(update={"draft": spec.draft.model_copy(update={"initial": None})})


@pytest.mark.parametrize(("launched", "job", "ready", "create", "reason"), [
    (False, InitJob.ABSENT, False, True, Reason.BOOTSTRAP_JOB_RUNNING),
    (False, InitJob.RUNNING, False, False, Reason.BOOTSTRAP_JOB_RUNNING),
    (False, InitJob.SUCCEEDED, True, False, Reason.BOOTSTRAP_DRAFT_LAUNCHED),
    (False, InitJob.FAILED, False, False, Reason.BOOTSTRAP_JOB_FAILED),
    (True, InitJob.ABSENT, True, False, Reason.BOOTSTRAP_DRAFT_LAUNCHED),  # the Job went (TTL): still launched
])
def test_bootstrap_step(launched: bool, job: InitJob, ready: bool, create: bool, reason: str) -> None:
    step = bootstrap_step(launched=launched, job=job, location=HEAD, job_name="chat-bootstrap-x")
    assert (step.ready, step.create_job, step.reason, step.failed) == (ready, create, reason, job is InitJob.FAILED
                                                                       and not launched)


@pytest.mark.parametrize(("status", "expected"), [
    ({}, InitJob.RUNNING),
    ({"active": 1, "failed": 1}, InitJob.RUNNING),  # an attempt failed, the Job retries (backoffLimit)
    ({"succeeded": 1}, InitJob.SUCCEEDED),
    ({"conditions": [{"type": "Complete", "status": "True"}]}, InitJob.SUCCEEDED),
    ({"failed": 3, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                   "message": "Job has reached the specified backoff limit"}]}, InitJob.FAILED),
])
def test_init_job_state(status: dict[str, Any], expected: InitJob) -> None:
    assert init_job_state({"status": status})[0] is expected
    assert init_job_state(None)[0] is InitJob.ABSENT


def test_the_init_job_runs_tide_trainer_init_on_the_training_pool() -> None:
    spec, config = bare_spec(), OperatorConfig()
    job = build_bootstrap_job("chat", "team", spec, placement(), config)
    assert job["metadata"]["name"] == names.bootstrap_job_name("chat", "5f1c0e2")
    assert job["spec"]["backoffLimit"] == BOOTSTRAP_RETRIES
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "tide_trainer", "init"]
    args = container["args"]
    assert args[args.index("--output") + 1] == bootstrap_location("chat", "team", spec) == HEAD
    assert args[args.index("--target-model") + 1] == BASE["target"]["model"]
    assert args[args.index("--target-revision") + 1] == "5f1c0e2"
    assert "--shards" not in args  # nothing captured yet
    # The training pool's class (MI250), one GPU: init reads head weights in one process, whatever gpusPerJob
    assert container["resources"]["limits"]["amd.com/gpu"] == 1
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_the_init_command_needs_the_trainers_train_subcommand() -> None:
    config = OperatorConfig.model_validate({"trainer": {"command": ["/bin/trainer"]}})
    with pytest.raises(ValueError, match="must end with the subcommand 'train'"):
        build_bootstrap_job("chat", "team", bare_spec(), placement(), config)


def test_one_job_name_and_key_per_target_revision_of_any_length() -> None:
    long_name = "a" * 63
    assert len(names.bootstrap_job_name(long_name, "r1")) <= 63
    assert names.bootstrap_job_name("chat", "r1") != names.bootstrap_job_name("chat", "r2")
    assert names.bootstrap_key("../../other-tenant").isalnum()  # a revision never shapes an S3 key


def test_the_pods_launch_with_the_head_at_k0_and_the_deployment_remembers_it() -> None:
    spec = bare_spec()
    assert render_serving_config("chat", "team", spec)["speculativeConfig"] is None  # before the head exists
    bands = launch_bands_with(None, HEAD)
    assert bands == OFF_BANDS
    deployment = build_serving_deployment("chat", "team", spec, placement(), OperatorConfig(), bootstrap_draft=HEAD,
                                          launch_bands=bands)
    assert deployment["metadata"]["annotations"][BOOTSTRAP_DRAFT_ANNOTATION] == HEAD
    rendered = render_serving_config("chat", "team", spec, HEAD, bands)["speculativeConfig"]
    assert rendered["model"] == HEAD
    assert rendered["num_speculative_tokens_per_batch_size"] == [[1, 1 << 20, 0]]
    # Rolled later with speculation on (pods without a runtime switch): those bands stay.
    assert launch_bands_with(full_bands(3), HEAD) == full_bands(3)
    # A deployment with draft.initial is unchanged: no annotation, its own launch table.
    initial = build_serving_deployment("chat", "team", spec_with(), placement(), OperatorConfig(), launch_bands=None)
    assert BOOTSTRAP_DRAFT_ANNOTATION not in initial["metadata"]["annotations"]
    assert launch_bands_with(None, None) is None
    # The pods leave the head (draft.initial given later, or a new revision's head not written yet): K=0 goes too.
    assert launch_bands_with(OFF_BANDS, None, HEAD) is None
    assert launch_bands_with(OFF_BANDS, HEAD, HEAD) == OFF_BANDS
    assert launch_bands_with(OFF_BANDS, None, None) == OFF_BANDS  # rolled off for speculation: kept


class FakeCluster:
    def __init__(self, job: dict[str, Any] | None = None, conflict: bool = False) -> None:
        self.job, self.conflict, self.created, self.reads = job, conflict, [], 0

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.job

    def create_owned(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> None:
        if self.conflict:
            raise ChildConflict([Conflict("Job", desired["metadata"]["name"], ("TideDeployment/other",))])
        if live is None:
            self.created.append(desired)


def _ensure(cluster: FakeCluster, spec: Any = None, deployment: dict[str, Any] | None = None,
            status: TideDeploymentStatus | None = None) -> tuple[str | None, StatusDraft]:
    draft = StatusDraft(status or TideDeploymentStatus(), generation=1, now=NOW)
    head = ensure_bootstrap("chat", "team", spec or bare_spec(), placement(), OperatorConfig(), cluster,
                            lambda obj: obj, draft, deployment)
    return head, draft


def _condition(draft: StatusDraft, kind: str) -> Any:
    return next(c for c in draft.status.conditions if c.type == kind)


def test_without_a_head_the_init_job_is_created_once_and_the_control_pass_waits() -> None:
    cluster = FakeCluster()
    head, draft = _ensure(cluster)
    assert head is None
    assert [j["metadata"]["name"] for j in cluster.created] == [names.bootstrap_job_name("chat", "5f1c0e2")]
    assert _condition(draft, ConditionType.BOOTSTRAP_DRAFT_READY).reason == Reason.BOOTSTRAP_JOB_RUNNING
    assert bootstrap_pending(draft.status)
    running = FakeCluster({"status": {"active": 1}})
    assert _ensure(running)[0] is None
    assert running.created == []  # found, not created again


def test_a_succeeded_job_rolls_the_pods_with_the_head_and_the_annotation_keeps_it() -> None:
    head, draft = _ensure(FakeCluster({"status": {"succeeded": 1}}))
    assert head == HEAD
    assert not bootstrap_pending(draft.status)
    gone = FakeCluster()  # the Job was deleted since: the Deployment's annotation says it launched
    head, _ = _ensure(gone, deployment={"metadata": {"annotations": {BOOTSTRAP_DRAFT_ANNOTATION: HEAD}}})
    assert (head, gone.reads, gone.created) == (HEAD, 0, [])


def test_a_failed_job_is_degraded_with_a_warning_and_clears_once_it_succeeds() -> None:
    failed = {"status": {"failed": 3, "conditions": [{"type": "Failed", "status": "True",
                                                      "reason": "BackoffLimitExceeded", "message": "3 attempts"}]}}
    head, draft = _ensure(FakeCluster(failed))
    assert head is None
    degraded = _condition(draft, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == ("True", Reason.BOOTSTRAP_JOB_FAILED)
    assert "BackoffLimitExceeded" in degraded.message
    assert "delete the Job" in degraded.message
    assert any(e.type == "Warning" and e.reason == Reason.BOOTSTRAP_JOB_FAILED for e in draft.events)
    head, later = _ensure(FakeCluster({"status": {"succeeded": 1}}), status=draft.status)
    assert head == HEAD
    assert _condition(later, ConditionType.DEGRADED).status == "False"


def test_a_namesake_job_not_ours_is_a_conflict_not_a_head() -> None:
    head, draft = _ensure(FakeCluster(conflict=True))
    assert head is None
    assert _condition(draft, ConditionType.DEGRADED).reason == Reason.CHILD_CONFLICT


def test_with_draft_initial_nothing_changes() -> None:
    cluster = FakeCluster()
    head, draft = _ensure(cluster, spec=spec_with())
    assert (head, cluster.reads, cluster.created, draft.status.conditions) == (None, 0, [], ())


def test_the_old_condition_does_not_hold_a_deployment_given_a_draft_later() -> None:
    _, waiting = _ensure(FakeCluster())
    _, given = _ensure(FakeCluster(), spec=spec_with(), status=waiting.status)
    assert not bootstrap_pending(given.status)
    assert _condition(given, ConditionType.BOOTSTRAP_DRAFT_READY).reason == Reason.BOOTSTRAP_NOT_NEEDED
