from __future__ import annotations

import re

import pytest
from manifest_fixtures import env_map, placement, spec_with

from tide_operator.config import OperatorConfig
from tide_operator.control.placement import Placement, PoolChoice
from tide_operator.manifests.names import dns_label, trainer_job_name
from tide_operator.manifests.trainer import build_trainer_job

CONFIG = OperatorConfig()
RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _job(spec=None, where=None, run_id="20261202-1310"):
    return build_trainer_job(
        "chat", "llm", spec or spec_with(), where or placement(), run_id=run_id, operator_config=CONFIG
    )


def test_job_identity_and_policy() -> None:
    job = _job()
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["metadata"]["name"] == "chat-train-20261202-1310"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "trainer"
    assert labels["tide.dev/deployment"] == "chat"
    assert labels["tide.dev/training-run"] == "20261202-1310"
    assert labels["tide.dev/gpu-class"] == "MI250"


def test_same_run_same_job_other_run_other_job() -> None:
    assert _job() == _job()
    assert _job(run_id="r2")["metadata"]["name"] != _job(run_id="r3")["metadata"]["name"]


def test_trainer_runs_on_the_training_class() -> None:
    job = _job(where=placement(inference="H100", training="MI250"))
    pod = job["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [term["matchExpressions"][0]["key"] for term in terms] == [
        "amd.com/gpu.device-id",
        "amd.com/gpu.product-name",
    ]
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {"amd.com/gpu": 4}}
    a100 = _job(where=placement(inference="H100", training="A100"))
    assert a100["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 4}}


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_command_line_follows_the_trainer_contract() -> None:
    (container,) = _job()["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["torchrun", "--nproc-per-node=4", "-m", "tide_trainer", "train"]
    args = container["args"]
    assert _flag(args, "--shards") == "s3://tide/llm/chat/captures"
    assert _flag(args, "--registry") == "s3://tide/llm/chat"
    assert _flag(args, "--run-id") == "20261202-1310"
    assert _flag(args, "--target-revision") == "5f1c0e2"
    assert _flag(args, "--speculative-tokens") == "3"
    assert _flag(args, "--parent-draft") == "s3://drafts/llama/eagle3-base"  # spec.draft.initial by default
    assert "--target-model" not in args
    assert _flag(args, "--work-dir") == CONFIG.trainer.work_dir
    assert {"name": "work", "mountPath": CONFIG.trainer.work_dir} in container["volumeMounts"]


def test_single_gpu_parent_draft_and_fresh_draft() -> None:
    spec = spec_with(training={"gpusPerJob": 1})
    job = build_trainer_job(
        "chat",
        "llm",
        spec,
        placement(),
        run_id="r1",
        operator_config=CONFIG,
        parent_draft="s3://tide/llm/chat/drafts/v3",
    )
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "tide_trainer", "train"]
    assert _flag(container["args"], "--parent-draft") == "s3://tide/llm/chat/drafts/v3"
    assert container["resources"] == {"limits": {"amd.com/gpu": 1}}
    fresh = spec.model_copy(update={"draft": spec.draft.model_copy(update={"initial": None})})
    (container,) = _job(fresh)["spec"]["template"]["spec"]["containers"]
    assert "--parent-draft" not in container["args"]
    assert _flag(container["args"], "--target-model") == "s3://models/llama-3.3-70b"


def test_env_and_scheduling() -> None:
    spec = spec_with(
        training={
            "tolerations": [{"key": "amd.com/gpu", "operator": "Exists"}],
            "priorityClassName": "batch-low",
            "serviceAccountName": "trainer",
        }
    )
    pod = _job(spec)["spec"]["template"]["spec"]
    env = env_map(pod["containers"][0])
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert env["AWS_ENDPOINT_URL"] == "http://minio.storage:9000"
    assert pod["tolerations"] == [{"key": "amd.com/gpu", "operator": "Exists"}]
    assert (pod["priorityClassName"], pod["serviceAccountName"]) == ("batch-low", "trainer")


def test_training_override_is_merged() -> None:
    spec = spec_with(training={"podTemplateOverride": {"spec": {"activeDeadlineSeconds": 7200}}})
    assert _job(spec)["spec"]["template"]["spec"]["activeDeadlineSeconds"] == 7200


def test_no_training_class_is_an_error() -> None:
    where = Placement(placement().inference, PoolChoice(None, "InsufficientGPUs", "need 1 x 4 GPUs"))
    with pytest.raises(ValueError, match="need 1 x 4 GPUs"):
        _job(where=where)


@pytest.mark.parametrize(
    ("td", "run_id"),
    [("chat", "1"), ("a" * 58, "20261202-131000"), ("chat", "Run_ID/With.Odd:Chars"), ("x" * 40, "y" * 40)],
)
def test_job_names_are_dns_labels_of_at_most_63(td: str, run_id: str) -> None:
    name = trainer_job_name(td, run_id)
    assert len(name) <= 63
    assert RFC1035.match(name), name
    assert name.startswith(td[:20])
    assert "-train-" in name


def test_long_names_keep_distinct_hashes() -> None:
    first, second = trainer_job_name("a" * 58, "run-1"), trainer_job_name("a" * 58, "run-2")
    assert first != second
    assert len(first) == len(second) == 63


def test_short_clean_names_are_kept_as_is() -> None:
    assert dns_label("chat-train-7") == "chat-train-7"
    assert dns_label("Chat_Train") != "chat-train"  # changed text gets a hash so names never collide
