"""The recall evaluation Job (issue 16): a trainer Job in all but its name, kind label and command line, whose
arguments come only from validated versions and the registry prefix the operator computes."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from manifest_fixtures import placement, spec_with

from tide_operator.config import OperatorConfig
from tide_operator.control.lifecycle_types import run_id_for
from tide_operator.manifests.labels import JOB_KIND_LABEL
from tide_operator.manifests.names import evaluation_job_name, trainer_job_name
from tide_operator.manifests.trainer import build_bootstrap_job, build_evaluation_job, build_trainer_job

CONFIG = OperatorConfig()
RUN = "3fa9c2d1-r7"
RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _eval(spec: Any = None, served: str | None = "v3", pooled: tuple[str, ...] = ("v1", "initial"),
          **kwargs: Any) -> dict[str, Any]:
    return build_evaluation_job("chat", "llm", spec or spec_with(), placement(), run_id=RUN, operator_config=CONFIG,
                                served_version=served, pooled_versions=pooled, **kwargs)


def _without_initial() -> Any:
    spec = spec_with()
    return spec.model_copy(update={"draft": spec.draft.model_copy(update={"initial": None})})


def _container(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def _flags(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_named_after_the_run_and_labelled_as_an_evaluation() -> None:
    job = _eval()
    assert job["metadata"]["name"] == "chat-eval-3fa9c2d1-r7"
    assert job["metadata"]["name"] != trainer_job_name("chat", RUN)
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels[JOB_KIND_LABEL] == "evaluation"
        assert labels["tide.dev/training-run"] == RUN
        assert labels["app.kubernetes.io/component"] == "trainer"
    trainer = build_trainer_job("chat", "llm", spec_with(), placement(), run_id=RUN, operator_config=CONFIG)
    assert trainer["metadata"]["labels"][JOB_KIND_LABEL] == "training"
    assert trainer["spec"]["template"]["metadata"]["labels"][JOB_KIND_LABEL] == "training"
    bootstrap = build_bootstrap_job("chat", "llm", _without_initial(), placement(), CONFIG)
    assert bootstrap["metadata"]["labels"][JOB_KIND_LABEL] == "bootstrap"


@pytest.mark.parametrize("counter", [1, 7, 10**9])
def test_names_stay_dns_labels(counter: int) -> None:
    td = "a-very-long-deployment-name-that-fills-most-of-the-sixty-three"
    name = evaluation_job_name(td, run_id_for(counter, "some-uid"))
    assert len(name) <= 63
    assert RFC1035.match(name)
    assert name != evaluation_job_name(td, run_id_for(counter + 1, "some-uid"))
    assert name != trainer_job_name(td, run_id_for(counter, "some-uid"))


def test_pod_policy_placement_image_and_s3_wiring_are_the_trainer_jobs() -> None:
    def without_command_line(job: dict[str, Any]) -> dict[str, Any]:
        template = copy.deepcopy(job["spec"]["template"])
        for container in template["spec"]["containers"]:
            del container["command"], container["args"]
        del template["metadata"]["labels"][JOB_KIND_LABEL]
        return template

    spec = spec_with(training={"gpusPerJob": 4, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]})
    trainer = build_trainer_job("chat", "llm", spec, placement(), run_id=RUN, operator_config=CONFIG,
                                deadline_s=900)
    job = _eval(spec, deadline_s=900)
    limits = [c["resources"]["limits"] for c in (_container(job), _container(trainer))]
    assert [lim["amd.com/gpu"] for lim in limits] == [1, 4]  # one process scores: one GPU, not gpusPerJob
    for c in (_container(job), _container(trainer)):
        del c["resources"]
    assert without_command_line(job) == without_command_line(trainer)
    assert job["spec"]["backoffLimit"] == trainer["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 900
    assert _eval()["spec"]["activeDeadlineSeconds"] > 0  # bounded by default: minutes of scoring, not a round


def test_one_process_running_the_recall_subcommand() -> None:
    container = _container(_eval(spec_with(training={"gpusPerJob": 4})))
    assert container["command"] == ["python", "-m", "tide_trainer", "recall"]  # never torchrun: no DDP in recall


def test_arguments_name_the_claim_and_each_draft_by_its_registry_location() -> None:
    args = _container(_eval(captured_since=1764950400.5))["args"]
    assert _flags(args, "--shards") == ["s3://tide/llm/chat/captures"]
    assert _flags(args, "--shard-claim") == [f"s3://tide/llm/chat/claims/{RUN}.json"]
    assert _flags(args, "--registry") == ["s3://tide/llm/chat"]
    assert _flags(args, "--run-id") == [RUN]
    assert _flags(args, "--target-revision") == ["5f1c0e2"]
    assert _flags(args, "--speculative-tokens") == ["3"]
    assert _flags(args, "--captured-since") == ["1764950400.5"]
    assert _flags(args, "--served-draft") == ["v3=s3://tide/llm/chat/drafts/v3"]
    assert _flags(args, "--pooled-drafts") == ["v1=s3://tide/llm/chat/drafts/v1",
                                               "initial=s3://drafts/llama/eagle3-base"]  # spec.draft.initial
    assert _flags(args, "--work-dir") == [CONFIG.trainer.work_dir]


def test_trainings_extra_flags_are_not_the_evaluations() -> None:
    tuned = CONFIG.model_copy(update={"trainer": CONFIG.trainer.model_copy(update={"extra_args": ("--epochs", "3")})})
    job = build_evaluation_job("chat", "llm", spec_with(), placement(), run_id=RUN, operator_config=tuned,
                               served_version="v3", pooled_versions=("v1",))
    assert "--epochs" not in _container(job)["args"]  # `recall` refuses keys it does not know (exit 2)


def test_without_a_served_draft_or_a_shift() -> None:
    args = _container(_eval(served=None, pooled=("v2",)))["args"]
    assert "--served-draft" not in args
    assert "--captured-since" not in args
    assert _flags(args, "--pooled-drafts") == ["v2=s3://tide/llm/chat/drafts/v2"]


@pytest.mark.parametrize(("served", "pooled", "named"), [
    ("v3", ("v0",), "'v0'"),
    ("v3", ("latest",), "'latest'"),
    ("v3", ("v1/../../other-team",), "'v1/../../other-team'"),
    ("v3", ("v1\n",), r"'v1\\n'"),
    ("../v3", ("v1",), "'../v3'"),
    ("v3", ("v1", "v1"), "'v1'"),
    ("v3", ("v3",), "'v3'"),
    ("v3", (), "pooled"),
])
def test_a_version_outside_the_pool_names_is_refused(served: str, pooled: tuple[str, ...], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        _eval(served=served, pooled=pooled)


def test_initial_needs_spec_draft_initial() -> None:
    with pytest.raises(ValueError, match="initial"):
        _eval(_without_initial(), served=None, pooled=("initial",))
