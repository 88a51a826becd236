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

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import events_where, wait_for
from tests.integration.promotion_flow import (
    REVISION,
    create,
    events,
    events_once,
    history,
    lifecycle,
    patch_spec,
    pod_drafts,
    promote_seed,
    registry_prefix,
    run_id,
    scenario,
    seed_draft_files,
    simulated_operator,
    spec,
    status,
    status_where,
    trained_job,
    trainer_log,
    upload,
)
from tide_contracts.registry import DraftRegistry, Manifest

pytestmark = pytest.mark.integration

GOOD, SHIFTED = 0.8, 0.5  # the served draft on its own domain, then on the new one (still worth speculating)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("general", {})))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    with simulated_operator(plane, kube, scenario_file, tmp_path_factory.mktemp("train")) as process:
        yield process


def drift_warm(kube, namespace: str) -> dict | None:
    """Speculation on and the drift detector's long EMA settled near the served draft's acceptance."""
    st = status(kube, namespace)
    drift = (st.get("controlState") or {}).get("drift") or {}
    on = (st.get("speculation") or {}).get("enabled") is True
    return st if on and drift.get("long_ema") and abs(drift["long_ema"] - GOOD) < 0.05 else None


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
    r1 = run_id(kube, namespace)  # <hash of the TideDeployment's UID>-r1

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
    events_once(kube, namespace, lambda ms: any("SetCapture" in m and "acceptance fell" in m for m in ms),
                "the SetCapture Event of the shift")

    # Enough fresh samples -> the trainer Job runs the real trainer on the captured shards.
    job = wait_for(lambda: trained_job(kube, plane, namespace), f"trainer Job chat-train-{r1} succeeded",
                   timeout_s=150)
    container = job.spec.template.spec.containers[0]
    assert container.command[-3:] == ["-m", "tide_trainer", "train"]
    assert f"s3://{bucket}/seed-draft" in container.args  # warm start from the served (launch) draft
    summary = json.loads(trainer_log(plane, namespace, r1).strip().splitlines()[-1])
    assert summary["result"] == "ok"
    assert summary["better"] is True
    assert summary["candidate_acceptance_length"] > summary["baseline_acceptance_length"]

    prefix = registry_prefix(namespace)
    manifest = Manifest.model_validate_json(s3.get_object(
        Bucket=bucket, Key=f"{prefix}/candidates/{r1}/manifest.json")["Body"].read())
    assert manifest.kind == "candidate"
    assert manifest.target_revision == REVISION
    assert manifest.samples["train_requests"] > 0
    assert manifest.samples["eval_requests"] > 0

    # Evaluation -> canary on one pod (the candidate under its run id) -> promoted everywhere.
    def canary():
        drafts = pod_drafts(kube, namespace)
        return drafts if sorted(drafts.values()) == sorted(["initial", r1]) else None

    wait_for(canary, f"candidate {r1} on one canary pod", timeout_s=60)
    # The pass swaps the pod first and writes status last: give the write a moment.
    wait_for(lambda: lifecycle(status(kube, namespace))["phase"] == "Canary", "lifecycle phase Canary",
             timeout_s=20)

    def promoted():
        drafts = pod_drafts(kube, namespace)
        return drafts if list(drafts.values()) == ["v1", "v1"] else None

    wait_for(promoted, "v1 on every pod", timeout_s=90)
    pointer = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")["Body"].read())
    assert (pointer["version"], pointer["run_id"], pointer["target_revision"]) == ("v1", r1, REVISION)
    promoted_manifest = Manifest.model_validate_json(
        s3.get_object(Bucket=bucket, Key=f"{prefix}/drafts/v1/manifest.json")["Body"].read())
    assert (promoted_manifest.kind, promoted_manifest.version) == ("draft", "v1")
    assert promoted_manifest.files == manifest.files  # the verified bytes of the candidate
    entries = history(s3, bucket, prefix)
    assert [(e["action"], e["version"], e["run_id"]) for e in entries] == [("promote", "v1", r1)]
    events_once(kube, namespace, lambda ms: all(any(m.startswith(f"{action}:") for m in ms)
                                                for action in ("LaunchTraining", "StartCanary", "Promote")),
                "the LaunchTraining, StartCanary and Promote Events")
    st = wait_for(lambda: status_where(kube, namespace, lambda lc: lc["last_promotion_at"] is not None),
                  "the promotion in status (written after the pods are swapped)", timeout_s=20)
    assert st["speculation"]["enabled"] is True


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
    r1 = run_id(kube, namespace)

    wait_for(lambda: list(pod_drafts(kube, namespace).values()) == ["v1", "v1"],
             "both pods serving the promoted v1 from the start", timeout_s=60)
    wait_for(lambda: drift_warm(kube, namespace), "speculation on, drift detector settled", timeout_s=120)
    shift_traffic(kube, namespace, scenario_file, acceptance)

    job = wait_for(lambda: trained_job(kube, plane, namespace), f"trainer Job chat-train-{r1} succeeded",
                   timeout_s=180)
    args = job.spec.template.spec.containers[0].args
    assert args[args.index("--parent-draft") + 1] == f"s3://{bucket}/{prefix}/drafts/v1"  # warm start from v1

    def canary():
        drafts = pod_drafts(kube, namespace)
        return drafts if sorted(drafts.values()) == sorted([r1, "v1"]) else None

    on_canary = wait_for(canary, f"candidate {r1} on one canary pod", timeout_s=60)
    canary_pod = next(p for p, v in on_canary.items() if v == r1)
    # The pods that got the candidate are recorded in status: the rollback swaps back exactly these.
    recorded = wait_for(lambda: status(kube, namespace).get("canary"), "the canary pods in status", timeout_s=20)
    assert recorded == {"candidate": r1, "pods": [canary_pod]}

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
                                                                           ("reject", "v1", r1)]
    st = wait_for(lambda: status_where(kube, namespace, lambda lc: lc["rollbacks"] == 1),
                  "the rollback in status (written after the pods are swapped back)", timeout_s=20)
    assert lifecycle(st).get("last_promotion_at") is None  # nothing promoted by the operator
    events_where(kube, namespace, lambda ws: any((e.message or "").startswith("RollBack:") for e in ws),
                 "the RollBack Warning Event", selector="involvedObject.name=chat,type=Warning")

    # The pointer flips outside a canary (someone promotes the candidate by hand): every pod serves a
    # stale draft now. Convergence compares versions and swaps them, one pod per pass here, naming them.
    # (A second run may already be training: its canary pod would go from v1 to its candidate instead.)
    patch_spec(kube, namespace, {"control": {"training": {"sampleThreshold": 4096}}})
    DraftRegistry(s3, bucket, prefix).promote(r1, target_revision=REVISION, tokenizer_hash=None,
                                               now=datetime.now(UTC), reason="promoted by hand")
    wait_for(lambda: "v1" not in pod_drafts(kube, namespace).values(), "no pod left on v1", timeout_s=60)
    swapped = wait_for(lambda: " ".join(events(kube, namespace, reason="DraftsConverged")) or None,
                       "the DraftsConverged Event", timeout_s=30)
    assert "v2" in pod_drafts(kube, namespace).values()
    assert any(f"{pod}: draft v1 -> v2" in swapped for pod in pod_drafts(kube, namespace)), swapped


def tide(plane, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `tide` CLI as a user runs it, against the plane."""
    return subprocess.run([sys.executable, "-m", "tide_operator.cli", "--kubeconfig", plane.kubeconfig,
                           "-n", namespace, *args], check=False, capture_output=True, text=True, timeout=120)


def test_promote_rollback_and_abort_by_hand(kube, namespace, operator, plane, s3, s3_endpoint, scenario_file,
                                            tmp_path):
    """`tide rollback|promote|abort` (issue 19): one-shot annotations the operator consumes and clears."""
    bucket, prefix = "tide-by-hand", registry_prefix(namespace)
    scenario_file.write_text(yaml.safe_dump(scenario("general", {"v1": {"general": GOOD}, "v2": {"general": 0.7}})))
    s3.create_bucket(Bucket=bucket)
    seed = seed_draft_files(tmp_path / "seed")
    upload(s3, bucket, "seed-draft", seed)
    promote_seed(s3, bucket, prefix, seed, run="seed")
    promote_seed(s3, bucket, prefix, seed, run="seed2")  # v2 serves, v1 before it
    create(kube, namespace, spec(bucket, s3_endpoint))
    wait_for(lambda: list(pod_drafts(kube, namespace).values()) == ["v2", "v2"], "both pods on v2", timeout_s=60)
    wait_for(lambda: (status(kube, namespace).get("draft") or {}).get("current") == "v2", "status names v2",
             timeout_s=30)

    back = tide(plane, namespace, "rollback", "chat", "--wait", "60s")
    assert back.returncode == 0, back.stderr
    assert "rollback from v2 requested (tide.dev/rollback=" in back.stdout
    assert "ManualRollback: FlipPointer: v2 -> v1: rolled back by hand" in back.stdout  # the operator's Event
    assert list(pod_drafts(kube, namespace).values()) == ["v1", "v1"]  # every pod swapped in the same pass
    annotations = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        "tide.dev", "v1alpha1", namespace, "tidedeployments", "chat")["metadata"].get("annotations") or {}
    assert "tide.dev/rollback" not in annotations  # consumed: it cannot fire again later

    forward = tide(plane, namespace, "promote", "chat", "v2", "--wait", "60s")
    assert forward.returncode == 0, forward.stderr
    assert "FlipPointer: v1 -> v2: v2 promoted by hand" in forward.stdout
    assert list(pod_drafts(kube, namespace).values()) == ["v2", "v2"]
    entries = history(s3, bucket, prefix)
    assert [(e["action"], e["version"], e["previous"], e.get("manual", False)) for e in entries] == [
        ("promote", "v1", None, False), ("promote", "v2", "v1", False),
        ("rollback", "v1", "v2", True), ("promote", "v2", "v1", True)]

    def pool_after_both_flips() -> dict[str, Any] | None:  # each flip is recorded by the pass after it
        try:
            body = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/pool.json")["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None
        served = {e["version"]: e for e in body["entries"]}
        ordered = {"v1", "v2"} <= set(served) and (
            served["v2"]["last_served_at"] > served["v1"]["last_served_at"] > served["v2"]["added_at"])
        return served if ordered else None

    wait_for(pool_after_both_flips, "the draft pool touching v1 (rolled back to), then v2 (promoted by hand)",
             timeout_s=30)

    # The CLI refuses what does not apply; the operator checks again when the annotation is set directly.
    nothing = tide(plane, namespace, "abort", "chat")
    assert (nothing.returncode, nothing.stderr.count("\n")) == (1, 1), nothing.stderr
    assert "no canary runs" in nothing.stderr
    unknown = tide(plane, namespace, "promote", "chat", "v9", "--wait", "60s")
    assert unknown.returncode == 1, unknown.stdout
    assert "Warning RequestRefused: tide.dev/promote: v9 was never promoted" in unknown.stdout
    patch_spec(kube, namespace, {"control": {"draftPin": "v2"}})
    pinned = tide(plane, namespace, "rollback", "chat")
    assert pinned.returncode == 1
    assert "spec.control.draftPin=v2 holds the draft" in pinned.stderr
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        "tide.dev", "v1alpha1", namespace, "tidedeployments", "chat",
        {"metadata": {"annotations": {"tide.dev/promote": "v1", "tide.dev/abort-canary": "now"}}})
    def both_refused() -> list[str] | None:
        found = [m for m in events(kube, namespace, reason="RequestRefused")
                 if "draftPin=v2" in m or "nothing to abort" in m]
        return found if len(found) == 2 else None

    refused = wait_for(both_refused, "both requests refused by the operator", timeout_s=30)
    assert any(m.startswith("tide.dev/promote: spec.control.draftPin=v2 holds the draft") for m in refused), refused
    wait_for(lambda: not {"tide.dev/promote", "tide.dev/abort-canary"} & set(
        client.CustomObjectsApi(kube).get_namespaced_custom_object(
            "tide.dev", "v1alpha1", namespace, "tidedeployments", "chat")["metadata"].get("annotations") or {}),
        "the refused requests removed", timeout_s=20)
    assert list(pod_drafts(kube, namespace).values()) == ["v2", "v2"]
    assert len(history(s3, bucket, prefix)) == 4
