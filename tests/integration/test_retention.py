"""Retention that holds (issue 13, item 3) on the real control plane, with Prometheus stopped and a hung trainer.

The simulator pods capture from the start; the first training run's Job runs a trainer command that
only sleeps (the operator configuration names it), with `control.training.timeout` as its deadline.
Then the operator's Prometheus stops answering (a switch in front of the plane's Prometheus, so the
shared server keeps scraping for other tests). While the trainer hangs and no control pass can run:

- every unclaimed capture is gone before it is `retention + prune interval` old;
- the shards the run claimed (claims/<run id>.json) outlive retention, but only until the Job's deadline;
- no capture is ever older than the bound docs/security.md states: retention + max(interval, timeout).

The Job stopped at its deadline is a failed run (TrainingDeadlineExceeded) once Prometheus answers again,
and deleting the TideDeployment deletes every capture and claim (drafts stay).
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import wait_for
from tests.integration.promotion_flow import (
    condition,
    create,
    events,
    keys,
    patch_spec,
    registry_prefix,
    run_id,
    scenario,
    seed_draft_files,
    sim_operator_config,
    spec,
    status,
    upload,
)
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_localcluster.plane import free_port
from tide_operator.api import GROUP, PLURAL, VERSION

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RETENTION_S, TIMEOUT_S, PRUNE_S = 15, 25, 2
SLACK_S = 3.0  # S3's LastModified has whole seconds, plus one listing and one pass of the timer
HANG = [sys.executable, "-c", "import time; time.sleep(3600)"]  # a trainer that never finishes


class PrometheusSwitch:
    """An HTTP forwarder to the plane's Prometheus that can be stopped (connections refused) and restarted."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.port = upstream.rstrip("/"), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        upstream = self.upstream

        class Forward(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                request = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                                 headers={"Content-Type": self.headers.get("Content-Type", "")})
                try:
                    with urllib.request.urlopen(request, timeout=10) as answer:
                        code, payload, kind = answer.status, answer.read(), answer.headers.get("Content-Type", "")
                except urllib.error.HTTPError as e:
                    code, payload, kind = e.code, e.read(), e.headers.get("Content-Type", "")
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _forward

            def log_message(self, *_: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Forward)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()  # refused from now on, not hanging
            self._server = None


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("general", {"initial": {"general": 0.6}})))
    return path


@pytest.fixture(scope="module")
def prometheus(plane):
    switch = PrometheusSwitch(plane.prometheus_url)
    switch.start()
    yield switch
    switch.stop()


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, prometheus):
    install_crd(kube)
    grant_operator_rbac(kube)
    config = {**sim_operator_config(scenario_file), "prometheusUrl": prometheus.url,
              "capturePruneIntervalSeconds": PRUNE_S, "deleteAttempts": 3, "trainer": {"command": HANG}}
    process = OperatorProcess(plane, config).start()
    yield process
    process.stop()


RETENTION_SPEC = {"capture": {"enabled": True, "samplingPercent": 100, "retention": f"{RETENTION_S}s"},
                  "drift": {"thresholdPercent": 50},  # no shift restarts the run
                  "training": {"sampleThreshold": 5, "timeout": f"{TIMEOUT_S}s"}}


def captures(s3, bucket: str, prefix: str) -> dict[str, float]:
    """Every capture's age in seconds, from one listing."""
    now = time.time()
    objs = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/captures/").get("Contents", [])
    return {o["Key"]: now - o["LastModified"].timestamp() for o in objs}


def trainer_job(kube, namespace: str):
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace).items
    name = f"chat-train-{run_id(kube, namespace)}"
    return next((j for j in jobs if j.metadata.name == name and j.status.active), None)


def watch_ages(s3, bucket: str, prefix: str, claimed: set[str], until: float) -> dict[str, float]:
    """Sample the buffer until ``until``: the oldest unclaimed and claimed capture ever seen."""
    seen = {"unclaimed": 0.0, "claimed": 0.0, "claimed_alive_past_retention": 0.0}
    while time.time() < until:
        for key, age in captures(s3, bucket, prefix).items():
            kind = "claimed" if key in claimed else "unclaimed"
            seen[kind] = max(seen[kind], age)
            if kind == "claimed" and age > RETENTION_S + PRUNE_S + SLACK_S:
                seen["claimed_alive_past_retention"] = max(seen["claimed_alive_past_retention"], age)
        time.sleep(0.5)
    return seen


def test_retention_holds_with_prometheus_stopped_and_a_hung_trainer(kube, namespace, operator, plane, prometheus,
                                                                    s3, s3_endpoint, tmp_path):
    started, bucket, prefix = time.monotonic(), "tide-retention", registry_prefix(namespace)
    s3.create_bucket(Bucket=bucket)
    upload(s3, bucket, "seed-draft", seed_draft_files(tmp_path / "seed"))
    s3.put_object(Bucket=bucket, Key=f"{prefix}/drafts/v9/keep.json", Body=b"{}")  # drafts outlive deletion
    create(kube, namespace, spec(bucket, s3_endpoint, RETENTION_SPEC))

    job = wait_for(lambda: trainer_job(kube, namespace), "the hung trainer Job of run 1 running", timeout_s=120)
    r1 = run_id(kube, namespace)
    assert job.spec.active_deadline_seconds == TIMEOUT_S
    claim = s3.get_object(Bucket=bucket, Key=f"{prefix}/claims/{r1}.json")["Body"].read()
    claim = yaml.safe_load(claim)
    claimed = {s["key"] for s in claim["shards"]}
    assert claimed
    assert claim["expires_at"] - claim["created_at"] == TIMEOUT_S
    args = job.spec.template.spec.containers[0].args
    assert args[args.index("--shard-claim") + 1] == f"s3://{bucket}/{prefix}/claims/{r1}.json"

    prometheus.stop()
    wait_for(lambda: condition(status(kube, namespace), "Degraded").get("reason") == "PrometheusUnreachable",
             "Degraded=True/PrometheusUnreachable", timeout_s=30)
    assert trainer_job(kube, namespace) is not None  # still hanging
    # Through the claim's deadline and one prune interval after it.
    seen = watch_ages(s3, bucket, prefix, claimed, until=claim["expires_at"] + PRUNE_S + SLACK_S)

    bound = RETENTION_S + max(PRUNE_S, TIMEOUT_S)
    print(f"retention={RETENTION_S}s interval={PRUNE_S}s timeout={TIMEOUT_S}s: oldest unclaimed capture "
          f"{seen['unclaimed']:.1f}s (<= {RETENTION_S + PRUNE_S}s + {SLACK_S}s), oldest claimed "
          f"{seen['claimed']:.1f}s (<= bound {bound}s + {SLACK_S}s)")
    assert seen["unclaimed"] <= RETENTION_S + PRUNE_S + SLACK_S
    assert seen["claimed_alive_past_retention"] > 0  # the claim kept the run's shards past retention
    assert max(seen["unclaimed"], seen["claimed"]) <= bound + SLACK_S
    wait_for(lambda: not (claimed & set(captures(s3, bucket, prefix))), "claimed shards pruned after the deadline",
             timeout_s=PRUNE_S + SLACK_S)
    wait_for(lambda: not keys(s3, bucket, f"{prefix}/claims/"), "the spent claim released", timeout_s=10)

    # Prometheus back: the Job stopped at its deadline is a failed run, with its reason.
    patch_spec(kube, namespace, {"control": {"training": {"sampleThreshold": 4096}}})  # no second run
    prometheus.start()
    deadline_events = wait_for(lambda: events(kube, namespace, "Warning", "TrainingDeadlineExceeded"),
                               "a TrainingDeadlineExceeded Event", timeout_s=60)
    assert "ran past its deadline" in deadline_events[0]

    client.CustomObjectsApi(kube).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
    wait_for(lambda: not client.CustomObjectsApi(kube).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"] or None, "the TideDeployment to be gone", timeout_s=60)
    assert keys(s3, bucket, f"{prefix}/captures/") == []
    assert keys(s3, bucket, f"{prefix}/claims/") == []
    assert keys(s3, bucket, f"{prefix}/drafts/") == [f"{prefix}/drafts/v9/keep.json"]
    assert keys(s3, bucket, "seed-draft/")
    wait_for(lambda: any("capture objects (drafts kept)" in m
                         for m in events(kube, namespace, reason="ArtifactsDeleted")),
             "the ArtifactsDeleted Event saying the drafts were kept", timeout_s=30)
    print(f"retention test body: {time.monotonic() - started:.0f}s")
