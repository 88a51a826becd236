"""Drafts promoted and rolled back end to end: drift, capture, the real trainer Job, canary, S3 registry.

Issue 4's scenarios 3 and 4 on the real control plane, with real Prometheus and a real S3 protocol
server (moto) on loopback. The vLLM pods run the simulator (acceptance per draft version and traffic
domain from a scenario file, shards in the trainer's format written to S3 while capture is on);
the trainer Job runs the real `python -m tide_trainer train` command line the operator builds, on
the shards the simulated pods captured, warm-starting from a tiny speculators draft shaped like the
simulator's capture model. In this tier the candidate's live acceptance comes from the scenario
(the trainer's held-out evaluation is real, on the simulator's synthetic but learnable rows).

3. traffic shifts to another domain -> acceptance drops -> collection -> trainer Job -> evaluation
   -> canary on one pod -> promoted to every pod, promoted.json and history updated in S3.
4. a candidate that is worse on live traffic -> rolled back: pointer unchanged, the canary pod
   back on the promoted draft, a rejection in the history.

Capture starts disabled and is enabled just before the shift, so the collection that feeds the
trainer is the one the shift starts (TIDE starts collecting at once otherwise).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.kubewait import wait_for
from tide_contracts.registry import DraftRegistry, FileEntry, Manifest
from tide_contracts.serving_control import ServingControlClient, ServingControlError
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_operator.api import GROUP, PLURAL, VERSION
from tide_trainer.export import export_speculators
from tide_trainer.model import DraftConfig, Eagle3Draft

pytestmark = pytest.mark.integration

REVISION = "r1"
HIDDEN, VOCAB = 32, 64  # the simulator's capture model and the seed draft agree on these
CAPTURE = {"hidden_size": HIDDEN, "vocab_size": VOCAB, "aux_layer_ids": [1, 2, 3], "max_rows_per_request": 48}
GOOD, SHIFTED = 0.8, 0.5  # the served draft on its own domain, then on the new one (still worth speculating)
# Small, quick training runs (CPU, two cores): a few dozen steps on the newest shards.
TRAINER_ARGS = ["--ttt-steps", "2", "--epochs", "2", "--max-steps", "40", "--lr", "0.01", "--batch-size", "8",
                "--eval-fraction", "0.2", "--window-shards", "8", "--log-every", "10"]


def scenario(domain: str, acceptance: dict[str, dict[str, float]]) -> dict:
    return {"seed": 5, "acceptance": acceptance, "capture": CAPTURE,
            "timeline": [{"at_s": 0, "domain": domain, "background_running": 4}]}


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("general", {})))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    install_crd(kube)
    grant_operator_rbac(kube)
    work = tmp_path_factory.mktemp("train")
    config = {"resyncIntervalSeconds": 2, "prometheusWindowSeconds": 8, "prometheusIntervalSeconds": 2,
              "serving": {"command": [sys.executable, "-m", "tide_vllm_sim", "--sim-scenario", str(scenario_file)]},
              # Pods here are processes without volumes: one work dir per run, or a run resumes another's checkpoint.
              "trainer": {"workDir": f"{work}/{{namespace}}/{{name}}/{{run_id}}", "extraArgs": TRAINER_ARGS}}
    process = OperatorProcess(plane, config).start()
    yield process
    process.stop()


def seed_draft_files(out: Path) -> list[Path]:
    """An untrained EAGLE-3 draft in speculators format, shaped like the simulator's capture model."""
    torch.manual_seed(7)
    cfg = DraftConfig(vocab_size=VOCAB, draft_vocab_size=VOCAB, hidden_size=HIDDEN, target_hidden_size=HIDDEN,
                      intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      aux_layer_ids=[1, 2, 3])
    return export_speculators(Eagle3Draft(cfg), out, verifier="target", speculative_tokens=3)


def upload(s3, bucket: str, prefix: str, files: list[Path]) -> None:
    for f in files:
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{f.name}", Body=f.read_bytes())


def spec(bucket: str, endpoint: str) -> dict:
    return {
        "target": {"model": "tide-local/tiny", "revision": REVISION, "servedModelName": "chat"},
        "draft": {"method": "eagle3", "initial": f"s3://{bucket}/seed-draft", "numSpeculativeTokens": 3},
        "inference": {"replicas": 2, "gpusPerReplica": 1},
        "control": {
            "interval": "5s", "decision": {"minDwell": "6s"}, "adaptiveSpeculativeTokens": False,
            "drift": {"shortHalfLife": "5s", "longHalfLife": "60s", "thresholdPercent": 5, "minSamples": 200},
            "capture": {"enabled": False, "samplingPercent": 20},
            "training": {"sampleThreshold": 40, "backoff": "10s"},
            "canary": {"replicas": 1, "analysisWindow": "30s", "minAcceptanceLengthGainPercent": 2,
                       "minPromotionInterval": "0s"},
        },
        "storage": {"s3": {"bucket": bucket, "endpoint": endpoint, "region": "us-east-1",
                           "credentialsSecret": "s3-creds"}},
    }


def create(kube, namespace: str, body: dict) -> None:
    client.CoreV1Api(kube).create_namespaced_secret(namespace, {
        "metadata": {"name": "s3-creds"}, "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}})
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": "chat"},
        "spec": copy.deepcopy(body)})


def patch_spec(kube, namespace: str, body: dict) -> None:
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat",
                                                                 {"spec": body})


def status(kube, namespace: str) -> dict:
    return client.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "chat").get("status") or {}


def lifecycle(st: dict) -> dict:
    return (st.get("controlState") or {}).get("lifecycle") or {}


def drift_warm(kube, namespace: str) -> dict | None:
    """Speculation on and the drift detector's long EMA settled near the served draft's acceptance."""
    st = status(kube, namespace)
    drift = (st.get("controlState") or {}).get("drift") or {}
    on = (st.get("speculation") or {}).get("enabled") is True
    return st if on and drift.get("long_ema") and abs(drift["long_ema"] - GOOD) < 0.05 else None


def pod_drafts(kube, namespace: str) -> dict[str, str | None]:
    """Each ready serving pod's draft version, as the pod itself reports it (control route)."""
    core = client.CoreV1Api(kube)
    try:
        token = base64.b64decode(core.read_namespaced_secret("chat-control", namespace).data["token"]).decode()
    except ApiException as e:
        if e.status == 404:
            return {}  # the operator has not created it yet
        raise
    pods = core.list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
    out = {}
    for p in sorted(pods, key=lambda p: p.metadata.name):
        if p.status.pod_ip and not p.metadata.deletion_timestamp:
            try:
                draft = ServingControlClient(f"http://{p.status.pod_ip}:8000", token).status().draft
            except (ServingControlError, OSError):
                continue  # not answering yet
            out[p.metadata.name] = draft.version if draft else None
    return out


def events(kube, namespace: str) -> list[str]:
    items = client.CoreV1Api(kube).list_namespaced_event(namespace, field_selector="involvedObject.name=chat").items
    return [e.message or "" for e in items]


def registry_prefix(namespace: str) -> str:
    """The deployment's registry prefix in the bucket (no spec.storage.s3.prefix: <namespace>/<name>)."""
    return f"{namespace}/chat"


def history(s3, bucket: str, prefix: str) -> list[dict]:
    objs = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/history/").get("Contents", [])
    return [json.loads(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()) for o in sorted(
        objs, key=lambda o: o["Key"])]


def shift_traffic(kube, namespace: str, scenario_file: Path, acceptance: dict) -> None:
    """Enable capture, then move every pod's traffic to the `legal` domain."""
    patch_spec(kube, namespace, {"control": {"capture": {"enabled": True}}})
    scenario_file.write_text(yaml.safe_dump(scenario("legal", acceptance)))


def test_domain_shift_trains_canaries_and_promotes_a_better_draft(kube, namespace, operator, plane, s3, s3_endpoint,
                                                                   scenario_file, tmp_path):
    bucket = "tide-promote"
    acceptance = {"initial": {"general": GOOD, "legal": SHIFTED},
                  "r1": {"general": GOOD, "legal": GOOD}, "v1": {"general": GOOD, "legal": GOOD}}
    scenario_file.write_text(yaml.safe_dump(scenario("general", acceptance)))
    s3.create_bucket(Bucket=bucket)
    upload(s3, bucket, "seed-draft", seed_draft_files(tmp_path / "seed"))
    create(kube, namespace, spec(bucket, s3_endpoint))

    wait_for(lambda: drift_warm(kube, namespace), "speculation on, drift detector settled", timeout_s=120)
    assert lifecycle(status(kube, namespace))["phase"] == "Serving"  # capture disabled: nothing collected

    # Traffic shifts: acceptance falls from 0.8 to 0.5 -> shift detected -> collection on the pods.
    shift_traffic(kube, namespace, scenario_file, acceptance)

    def collecting():
        st = status(kube, namespace)
        return st if lifecycle(st).get("phase") in ("Collecting", "Training") else None

    st = wait_for(collecting, "collection after the shift", timeout_s=90)
    drift = st["controlState"]["drift"]
    assert drift["short_ema"] < drift["long_ema"] * 0.95
    assert any("SetCapture" in m and "acceptance fell" in m for m in events(kube, namespace))

    # Enough fresh samples -> the trainer Job runs the real trainer on the captured shards.
    batch = client.BatchV1Api(kube)

    def trained():
        jobs = batch.list_namespaced_job(namespace).items
        job = next((j for j in jobs if j.metadata.name == "chat-train-r1"), None)
        if job is not None and job.status.failed:
            raise AssertionError(f"trainer Job failed:\n{trainer_log(plane, namespace)}")
        return job if job is not None and job.status.succeeded else None

    job = wait_for(trained, "trainer Job chat-train-r1 succeeded", timeout_s=150)
    container = job.spec.template.spec.containers[0]
    assert container.command[-3:] == ["-m", "tide_trainer", "train"]
    assert f"s3://{bucket}/seed-draft" in container.args  # warm start from the served (launch) draft
    summary = json.loads(trainer_log(plane, namespace).strip().splitlines()[-1])
    assert summary["result"] == "ok"
    assert summary["better"] is True
    assert summary["candidate_acceptance_length"] > summary["baseline_acceptance_length"]

    prefix = registry_prefix(namespace)
    manifest = Manifest.model_validate_json(s3.get_object(
        Bucket=bucket, Key=f"{prefix}/candidates/r1/manifest.json")["Body"].read())
    assert manifest.kind == "candidate"
    assert manifest.target_revision == REVISION
    assert manifest.samples["train_requests"] > 0
    assert manifest.samples["eval_requests"] > 0

    # Evaluation -> canary on one pod (the candidate under its run id) -> promoted everywhere.
    def canary():
        drafts = pod_drafts(kube, namespace)
        return drafts if sorted(drafts.values()) == ["initial", "r1"] else None

    wait_for(canary, "candidate r1 on one canary pod", timeout_s=60)
    # The pass swaps the pod first and writes status last: give the write a moment.
    wait_for(lambda: lifecycle(status(kube, namespace))["phase"] == "Canary", "lifecycle phase Canary",
             timeout_s=20)

    def promoted():
        drafts = pod_drafts(kube, namespace)
        return drafts if list(drafts.values()) == ["v1", "v1"] else None

    wait_for(promoted, "v1 on every pod", timeout_s=90)
    pointer = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")["Body"].read())
    assert (pointer["version"], pointer["run_id"], pointer["target_revision"]) == ("v1", "r1", REVISION)
    promoted_manifest = Manifest.model_validate_json(
        s3.get_object(Bucket=bucket, Key=f"{prefix}/drafts/v1/manifest.json")["Body"].read())
    assert (promoted_manifest.kind, promoted_manifest.version) == ("draft", "v1")
    assert promoted_manifest.files == manifest.files  # the verified bytes of the candidate
    entries = history(s3, bucket, prefix)
    assert [(e["action"], e["version"], e["run_id"]) for e in entries] == [("promote", "v1", "r1")]
    messages = events(kube, namespace)
    for action in ("LaunchTraining", "StartCanary", "Promote"):
        assert any(m.startswith(f"{action}:") for m in messages), (action, messages)
    st = wait_for(lambda: status_where(kube, namespace, lambda lc: lc["last_promotion_at"] is not None),
                  "the promotion in status (written after the pods are swapped)", timeout_s=20)
    assert st["speculation"]["enabled"] is True


def status_where(kube, namespace: str, holds) -> dict | None:
    """The status once its lifecycle satisfies `holds` (a pass swaps pods first, writes status last)."""
    st = status(kube, namespace)
    return st if holds(lifecycle(st)) else None


def trainer_log(plane, namespace: str) -> str:
    logs = sorted((Path(plane.state_dir) / "pods" / namespace).glob("chat-train-r1-*/trainer.log"))
    return logs[0].read_text(errors="replace") if logs else "(no trainer log)"


def promote_seed(s3, bucket: str, prefix: str, files: list[Path]) -> None:
    """A promoted v1 in the registry before the deployment starts (the operator's own registry code)."""
    upload(s3, bucket, f"{prefix}/candidates/seed", files)
    manifest = Manifest(kind="candidate", run_id="seed", created_at=datetime.now(UTC).isoformat(),
                        target_revision=REVISION, eval={"candidate_acceptance_length": 2.0},
                        files={f.name: FileEntry(sha256=hashlib.sha256(f.read_bytes()).hexdigest(),
                                                 bytes=f.stat().st_size) for f in files})
    s3.put_object(Bucket=bucket, Key=f"{prefix}/candidates/seed/manifest.json",
                  Body=manifest.model_dump_json().encode())
    DraftRegistry(s3, bucket, prefix).promote("seed", target_revision=REVISION, tokenizer_hash=None,
                                               now=datetime.now(UTC), reason="seed")


def test_candidate_worse_on_live_traffic_is_rolled_back(kube, namespace, operator, plane, s3, s3_endpoint,
                                                        scenario_file, tmp_path):
    bucket, prefix = "tide-rollback", registry_prefix(namespace)
    # v1 serves; the trainer will beat it on held-out data, but its candidate is worse on live traffic.
    acceptance = {"v1": {"general": GOOD, "legal": SHIFTED}, "r1": {"general": GOOD, "legal": 0.35}}
    scenario_file.write_text(yaml.safe_dump(scenario("general", acceptance)))
    s3.create_bucket(Bucket=bucket)
    seed = seed_draft_files(tmp_path / "seed")
    upload(s3, bucket, "seed-draft", seed)
    promote_seed(s3, bucket, prefix, seed)
    pointer_before = s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")
    pointer_body, pointer_etag = pointer_before["Body"].read(), pointer_before["ETag"]
    create(kube, namespace, spec(bucket, s3_endpoint))

    wait_for(lambda: list(pod_drafts(kube, namespace).values()) == ["v1", "v1"],
             "both pods serving the promoted v1 from the start", timeout_s=60)
    wait_for(lambda: drift_warm(kube, namespace), "speculation on, drift detector settled", timeout_s=120)
    shift_traffic(kube, namespace, scenario_file, acceptance)

    batch = client.BatchV1Api(kube)

    def trained():
        job = next((j for j in batch.list_namespaced_job(namespace).items if j.metadata.name == "chat-train-r1"), None)
        if job is not None and job.status.failed:
            raise AssertionError(f"trainer Job failed:\n{trainer_log(plane, namespace)}")
        return job if job is not None and job.status.succeeded else None

    job = wait_for(trained, "trainer Job chat-train-r1 succeeded", timeout_s=180)
    args = job.spec.template.spec.containers[0].args
    assert args[args.index("--parent-draft") + 1] == f"s3://{bucket}/{prefix}/drafts/v1"  # warm start from v1

    def canary():
        drafts = pod_drafts(kube, namespace)
        return drafts if sorted(drafts.values()) == ["r1", "v1"] else None

    on_canary = wait_for(canary, "candidate r1 on one canary pod", timeout_s=60)
    canary_pod = next(p for p, v in on_canary.items() if v == "r1")

    def rolled_back():
        msgs = [m for m in events(kube, namespace) if m.startswith("RollBack:")]
        return msgs or None

    messages = wait_for(rolled_back, "the canary rolled back", timeout_s=90)
    assert "failed=1" in messages[0]
    wait_for(lambda: pod_drafts(kube, namespace).get(canary_pod) == "v1", "canary pod back on v1", timeout_s=30)
    assert set(pod_drafts(kube, namespace).values()) == {"v1"}

    pointer_after = s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")
    assert (pointer_after["Body"].read(), pointer_after["ETag"]) == (pointer_body, pointer_etag)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/drafts/v2/")
    entries = history(s3, bucket, prefix)
    assert [(e["action"], e["version"], e["run_id"]) for e in entries] == [("promote", "v1", "seed"),
                                                                           ("reject", "v1", "r1")]
    st = wait_for(lambda: status_where(kube, namespace, lambda lc: lc["rollbacks"] == 1),
                  "the rollback in status (written after the pods are swapped back)", timeout_s=20)
    assert lifecycle(st).get("last_promotion_at") is None  # nothing promoted by the operator
    warnings = client.CoreV1Api(kube).list_namespaced_event(
        namespace, field_selector="involvedObject.name=chat,type=Warning").items
    assert any((e.message or "").startswith("RollBack:") for e in warnings)
