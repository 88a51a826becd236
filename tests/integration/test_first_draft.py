"""Start without a draft (issue 14 item 4): from no spec.draft.initial to a promoted v1 on the local plane.

The operator runs the real `python -m tide_trainer init` as a Job (a fresh head shaped after a tiny
target on disk, the simulator's capture shape), rolls the simulated vLLM pods with the head at K=0
(nothing drafted, capture flows), the real trainer warm-starts from the head on the captured shards,
and the first draft's canary is judged on its own modelled speedup and the control pods' throughput:
it is promoted to v1 on every pod and speculation switches on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import wait_for
from tests.integration.promotion_flow import (
    REVISION,
    condition,
    create,
    events,
    history,
    lifecycle,
    operator_config,
    pod_drafts,
    registry_prefix,
    scenario,
    spec,
    status,
    trainer_log,
)
from tide_contracts.registry import Manifest
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_e2e.sim_draft import CAPTURE
from tide_operator.manifests import names

pytestmark = pytest.mark.integration

# The bootstrap head drafts nothing (K=0); any trained candidate, and v1, accept 0.8 on live traffic.
ACCEPTANCE = {"initial": {"*": 0.0}, "*": {"*": 0.8}}


def write_tiny_target(out: Path) -> Path:
    """What `tide_trainer init` reads of a target, in the simulator's capture shape (4 layers: aux 1,2,3)."""
    import torch
    from safetensors.torch import save_file

    hidden, vocab = CAPTURE["hidden_size"], CAPTURE["vocab_size"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": hidden, "vocab_size": vocab, "num_hidden_layers": 4,
        "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}))
    gen = torch.Generator().manual_seed(1)
    save_file({"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=gen),
               "model.norm.weight": torch.ones(hidden), "lm_head.weight": torch.randn(vocab, hidden, generator=gen)},
              str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim-first") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("general", ACCEPTANCE)))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    install_crd(kube)
    grant_operator_rbac(kube)
    process = OperatorProcess(plane, operator_config(scenario_file, tmp_path_factory.mktemp("train-first"))).start()
    yield process
    process.stop()


def first_draft_spec(bucket: str, endpoint: str, target: Path) -> dict:
    body = spec(bucket, endpoint, {"capture": {"enabled": True, "samplingPercent": 100},
                                   "canary": {"analysisWindow": "24s"}})
    body["target"]["model"] = str(target)
    body["draft"] = {"method": "eagle3", "numSpeculativeTokens": 3}  # no initial draft
    return body


def test_no_initial_draft_bootstraps_a_head_trains_and_promotes_v1(kube, namespace, operator, plane, s3, s3_endpoint,
                                                                   tmp_path):
    bucket, prefix = "tide-first", registry_prefix(namespace)
    s3.create_bucket(Bucket=bucket)
    target = write_tiny_target(tmp_path / "tiny-target")
    create(kube, namespace, first_draft_spec(bucket, s3_endpoint, target))
    head = f"s3://{bucket}/{prefix}/bootstrap/{names.bootstrap_key(REVISION)}"

    # The init Job writes the head; the pods are rolled with it at K=0 and report it as their launch draft.
    # The init Job imports torch and the rollout starts two simulator pods: generous on a loaded 2-core machine.
    try:
        st = wait_for(lambda: _status_if(kube, namespace, lambda s: condition(s, "BootstrapDraftReady").get("status")
                                         == "True"), "the bootstrap head written and launched", timeout_s=150)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_bootstrap_story(kube, namespace)}") from None
    assert condition(st, "BootstrapDraftReady")["reason"] == "BootstrapDraftLaunched"
    manifest = Manifest.model_validate_json(s3.get_object(
        Bucket=bucket, Key=f"{prefix}/bootstrap/{names.bootstrap_key(REVISION)}/manifest.json")["Body"].read())
    assert (manifest.kind, manifest.target_revision) == ("bootstrap", REVISION)
    deployment = client.AppsV1Api(kube).read_namespaced_deployment("chat-vllm", namespace)
    args = deployment.spec.template.spec.containers[0].args
    launch = json.loads(args[args.index("--speculative-config") + 1])
    assert (launch["model"], launch["num_speculative_tokens_per_batch_size"]) == (head, [[1, 1 << 20, 0]])
    assert not any(k.startswith(f"{prefix}/drafts/") for k in _keys(s3, bucket, prefix))  # the head is no vN

    # Capture flows from pods that draft nothing; the trainer warm-starts from the head.
    job = wait_for(lambda: _trained(kube, plane, namespace), "the first trainer Job succeeded", timeout_s=120)
    job_args = job.spec.template.spec.containers[0].args
    assert job_args[job_args.index("--parent-draft") + 1] == head
    assert any(k.startswith(f"{prefix}/captures/") for k in _keys(s3, bucket, prefix))

    # The first draft's canary: judged on its own speedup at the observed load, then promoted everywhere.
    wait_for(lambda: list(pod_drafts(kube, namespace).values()) == ["v1", "v1"], "v1 on every pod", timeout_s=120)
    pointer = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")["Body"].read())
    assert (pointer["version"], pointer["target_revision"]) == ("v1", REVISION)
    assert [e["action"] for e in history(s3, bucket, prefix)] == ["promote"]
    wait_for(lambda: [m for m in events(kube, namespace)  # Kopf posts Events from a queue: wait for it
                      if m.startswith("Promote:") and "first draft, judged by modelled speedup" in m],
             "the Promote Event of a first draft", timeout_s=20)
    st = wait_for(lambda: _status_if(kube, namespace, lambda s: (s.get("speculation") or {}).get("enabled") is True),
                  "speculation on with v1", timeout_s=45)
    assert lifecycle(st).get("last_promotion_at") is not None
    assert condition(st, "Promoting")["reason"] == "CanarySuccessful"


def _status_if(kube, namespace: str, holds):
    st = status(kube, namespace)
    return st if holds(st) else None


def _bootstrap_story(kube, namespace: str) -> str:
    """What a timed-out wait saw: the condition, the init Job's status and the serving pods' phases."""
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace).items
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace).items
    return "\n".join([f"BootstrapDraftReady: {condition(status(kube, namespace), 'BootstrapDraftReady')}",
                       *(f"Job {j.metadata.name}: {j.status.to_dict()}" for j in jobs),
                       *(f"Pod {p.metadata.name}: {p.status.phase} ready={_ready(p)}" for p in pods)])


def _ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _keys(s3, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def _trained(kube, plane, namespace: str):
    """The first trainer Job once it succeeded (its run id starts with a hash of the deployment's UID)."""
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace).items
    job = next((j for j in jobs if j.metadata.name.startswith("chat-train-")), None)
    if job is not None and job.status.failed:
        run = job.metadata.name.removeprefix("chat-train-")
        raise AssertionError(f"trainer Job failed:\n{trainer_log(plane, namespace, run)}")
    return job if job is not None and job.status.succeeded else None
