"""Promotion under faults, end to end (issue 4's scenarios 6 and 7) on the real control plane.

Same setup as test_promotion.py (simulator pods, real Prometheus, loopback S3, the real trainer
Job), but capture is on from the start (TIDE's default) and the served draft's acceptance does not
move, so the first run trains at once without waiting for a shift.

6. a candidate corrupted in S3 after the trainer uploaded it is refused at promotion: the pointer
   (to a v1 promoted before) unchanged, no drafts/v2, the canary pod back on v1, a rejection in
   the history, the Promoting condition and a Warning Event naming the checksum. The capture
   buffer is pruned to spec.control.capture.maxBufferSamples meanwhile.
7. the operator is SIGKILLed mid-canary and restarted while the deployment's S3 endpoint is down:
   Degraded/StorageUnreachable, the canary held past its window with nothing promoted; once S3 is
   back the resumed analysis promotes v1 exactly once, from the one trainer Job.

Scenario 6 serves a v1 promoted beforehand, so the rollback goes to a registry version with a
manifest; going back to a never-promoted launch draft (no manifest) is covered by the plugin's and
the simulator's unit tests and, on real vLLM with a local launch draft, by tests/engine.

S3 failing between the registry's reads and its writes (a narrower window than a test can hit on
purpose) is covered against the registry and the effects in tests/unit (test_registry.py,
test_candidate_refusal.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from moto.server import ThreadedMotoServer

from tests.integration.kubewait import wait_for
from tests.integration.promotion_flow import (
    condition,
    create,
    events,
    history,
    keys,
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
    upload,
)
from tide_contracts.registry import DraftRegistry
from tide_localcluster.plane import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(480)]

# The candidate beats the served draft on live traffic (E[l] 2.95 vs 2.18 at g=3): its canary succeeds.
SEEDED = {"v1": {"general": 0.6}, "r1": {"general": 0.8}}  # v1 = a seed promoted before the deployment
UNSEEDED = {"initial": {"general": 0.6}, "r1": {"general": 0.8}, "v1": {"general": 0.8}}  # v1 = r1 promoted
BUFFER_CAP = 40  # maxBufferSamples = sampleThreshold: the buffer is pruned once the first run is done
# Capture from the start; a drift threshold no noise reaches, so no shift restarts the run.
COLLECT_AT_ONCE = {"capture": {"enabled": True, "samplingPercent": 20}, "drift": {"thresholdPercent": 50}}
# Patched in once the first run is done, so no second run starts (a policy knob: the pods are untouched).
NO_SECOND_RUN = {"control": {"training": {"sampleThreshold": 4096}}}


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("general", UNSEEDED)))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    with simulated_operator(plane, kube, scenario_file, tmp_path_factory.mktemp("train")) as process:
        yield process


class DeploymentS3:
    """A second endpoint onto the test's in-process S3 (moto keeps one store per process).

    The deployment (operator, pods, trainer) reaches S3 only through it, so stopping it is an
    outage for the deployment while the test keeps looking through the session endpoint.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: ThreadedMotoServer | None = None

    def start(self) -> None:
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.stop()
        # shutdown() alone leaves the socket listening: clients would hang instead of being refused.
        self._server._server.server_close()  # type: ignore[union-attr]
        self._server = None


@pytest.fixture
def deployment_s3(s3) -> Iterator[DeploymentS3]:
    endpoint = DeploymentS3()
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


def start_deployment(kube, namespace: str, s3, bucket: str, endpoint: str, tmp_path: Path, *, seeded: bool,
                     control: dict | None = None) -> None:
    s3.create_bucket(Bucket=bucket)
    seed = seed_draft_files(tmp_path / "seed")
    upload(s3, bucket, "seed-draft", seed)
    if seeded:
        promote_seed(s3, bucket, registry_prefix(namespace), seed)
    sections = {k: {**COLLECT_AT_ONCE.get(k, {}), **(control or {}).get(k, {})}
                for k in {*COLLECT_AT_ONCE, *(control or {})}}
    create(kube, namespace, spec(bucket, endpoint, sections))


def wait_for_canary(kube, plane, namespace: str, served: str) -> dict[str, str | None]:
    """The first run trained, its candidate on one canary pod, the Canary phase in status; the pods' drafts."""
    r1 = run_id(kube, namespace)
    wait_for(lambda: trained_job(kube, plane, namespace), f"trainer Job chat-train-{r1} succeeded", timeout_s=200)

    def on_canary():
        drafts = pod_drafts(kube, namespace)
        return drafts if sorted(drafts.values()) == sorted([r1, served]) else None

    drafts = wait_for(on_canary, f"candidate {r1} on one canary pod", timeout_s=60)
    wait_for(lambda: status_where(kube, namespace, lambda lc: lc.get("phase") == "Canary"), "lifecycle phase Canary",
             timeout_s=20)
    return drafts


def buffer_samples(s3, bucket: str, prefix: str) -> int:
    return sum(c.samples for c in DraftRegistry(s3, bucket, prefix).list_captures())


def trainer_jobs(kube, namespace: str) -> list[tuple[str, str]]:
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace, label_selector="tide.dev/training-run").items
    return sorted((j.metadata.name, j.metadata.uid) for j in jobs)


def test_a_candidate_corrupted_before_promotion_is_refused(kube, namespace, operator, plane, s3, s3_endpoint,
                                                           scenario_file, tmp_path):
    bucket, prefix = "tide-corrupt", registry_prefix(namespace)
    scenario_file.write_text(yaml.safe_dump(scenario("general", SEEDED)))
    start_deployment(kube, namespace, s3, bucket, s3_endpoint, tmp_path, seeded=True,
                     control={"capture": {"maxBufferSamples": BUFFER_CAP}})
    pointer = s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")
    pointer_before = (pointer["Body"].read(), pointer["ETag"])
    on_canary = wait_for_canary(kube, plane, namespace, served="v1")
    r1 = run_id(kube, namespace)

    # The candidate's weights change under the canary: they no longer match its manifest.
    key = f"{prefix}/candidates/{r1}/model.safetensors"
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=body[:-1] + bytes([body[-1] ^ 0xFF]))
    manifest_before = s3.get_object(Bucket=bucket, Key=f"{prefix}/candidates/{r1}/manifest.json")["Body"].read()

    rollbacks = wait_for(lambda: [m for m in events(kube, namespace, "Warning") if m.startswith("RollBack:")],
                         "the refused candidate rolled back", timeout_s=90)
    assert f"{key}: sha256" in rollbacks[0]

    pointer = s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")
    assert (pointer["Body"].read(), pointer["ETag"]) == pointer_before  # never rewritten
    assert keys(s3, bucket, f"{prefix}/drafts/v2/") == []  # verified before any version was claimed
    entries = history(s3, bucket, prefix)
    assert [(e["action"], e["version"], e["run_id"]) for e in entries] == [("promote", "v1", "seed"),
                                                                           ("reject", "v1", r1)]
    assert "does not match the manifest" in entries[1]["reason"]
    canary_pod = next(p for p, v in on_canary.items() if v == r1)
    wait_for(lambda: pod_drafts(kube, namespace).get(canary_pod) == "v1", "the canary pod back on v1", timeout_s=30)
    st = wait_for(lambda: status_where(kube, namespace, lambda lc: lc["rollbacks"] == 1),
                  "the rollback in status", timeout_s=20)
    # Promoting says why until the next canary (lastDecision moves on with the next decision).
    promoting = condition(st, "Promoting")
    assert (promoting["status"], promoting["reason"]) == ("False", "ChecksumMismatch")
    assert f"{key}: sha256" in promoting["message"]
    assert "does not match the manifest" in promoting["message"]
    assert lifecycle(st).get("last_promotion_at") is None
    assert condition(st, "Degraded")["status"] == "False"  # a decision, not an outage
    # The candidate is left as the trainer wrote it (evidence), never copied.
    assert s3.get_object(Bucket=bucket, Key=f"{prefix}/candidates/{r1}/manifest.json")["Body"].read() == \
        manifest_before

    # Pruning ran once the trainer was done (the buffer was past its cap) and kept to captures/.
    pruned = wait_for(lambda: events(kube, namespace, reason="CapturesPruned"), "the CapturesPruned Event",
                      timeout_s=30)
    assert f"maxBufferSamples={BUFFER_CAP}" in pruned[0]
    assert keys(s3, bucket, f"{prefix}/candidates/{r1}/")
    assert keys(s3, bucket, f"{prefix}/drafts/v1/")
    assert keys(s3, bucket, "seed-draft/")


def test_operator_killed_mid_canary_during_an_s3_outage_resumes_and_promotes_once(
        kube, namespace, operator, plane, s3, deployment_s3, scenario_file, tmp_path):
    bucket, prefix, window_s = "tide-restart", registry_prefix(namespace), 45
    scenario_file.write_text(yaml.safe_dump(scenario("general", UNSEEDED)))
    start_deployment(kube, namespace, s3, bucket, deployment_s3.url, tmp_path, seeded=False,
                     control={"canary": {"analysisWindow": f"{window_s}s"}})
    wait_for_canary(kube, plane, namespace, served="initial")
    r1 = run_id(kube, namespace)
    patch_spec(kube, namespace, NO_SECOND_RUN)
    jobs_before = trainer_jobs(kube, namespace)
    assert [name for name, _ in jobs_before] == [f"chat-train-{r1}"]
    st = wait_for(lambda: status_where(kube, namespace, lambda lc: (lc.get("canary") or {}).get("successful")),
                  "a successful canary measurement", timeout_s=40)
    analysis = lifecycle(st)["canary"]

    operator.stop(kill=True)  # SIGKILL: no shutdown handler, whatever the pass was doing
    deployment_s3.stop()
    operator.start()

    def storage_degraded():
        st = status(kube, namespace)
        return st if condition(st, "Degraded").get("reason") == "StorageUnreachable" else None

    st = wait_for(storage_degraded, "Degraded=True/StorageUnreachable from the restarted operator", timeout_s=60)
    assert condition(st, "Degraded")["status"] == "True"
    assert lifecycle(st)["canary"]["started_at"] == analysis["started_at"]  # the same analysis, not a new one
    # Past the end of the analysis window: a reachable S3 would have seen the promotion by now.
    time.sleep(max(0.0, analysis["started_at"] + window_s + 10 - time.time()))
    assert lifecycle(status(kube, namespace))["phase"] == "Canary"
    assert keys(s3, bucket, f"{prefix}/promoted.json") == []
    assert keys(s3, bucket, f"{prefix}/drafts/") == []
    assert history(s3, bucket, prefix) == []
    assert sorted(pod_drafts(kube, namespace).values()) == sorted(["initial", r1])  # the fleet serves as it was

    deployment_s3.start()
    wait_for(lambda: list(pod_drafts(kube, namespace).values()) == ["v1", "v1"], "v1 on every pod", timeout_s=60)
    entries = history(s3, bucket, prefix)
    assert [(e["action"], e["version"], e["run_id"]) for e in entries] == [("promote", "v1", r1)]
    assert {k.split("/drafts/")[1].split("/")[0] for k in keys(s3, bucket, f"{prefix}/drafts/")} == {"v1"}
    # Kopf posts Events from a queue: the pods can be on v1 before the Promote Event is written.
    promotes = wait_for(lambda: [m for m in events(kube, namespace) if m.startswith("Promote:")],
                        "the Promote Event", timeout_s=20)
    assert len(promotes) == 1
    # The restarted operator went on with the analysis in status: its count starts from the one before the kill.
    assert int(re.search(r"successful=(\d+)", promotes[0]).group(1)) > analysis["successful"]
    st = wait_for(lambda: status_where(kube, namespace, lambda lc: lc.get("last_promotion_at") is not None),
                  "the promotion in status", timeout_s=20)
    assert condition(st, "Degraded")["status"] == "False"
    assert trainer_jobs(kube, namespace) == jobs_before  # the same one Job: not recreated, no r2
