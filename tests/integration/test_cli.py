"""`tide status` and `tide plot` against the real control plane and the plane's real Prometheus.

A pod (a process on a fake node) serves vLLM-named metrics whose story is scripted by its own clock:
draft v1, then v2 after a promotion, speculation off for a while, a varying batch. Prometheus
scrapes it; the test writes the matching Events and status, then runs the CLI as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.kubewait import wait_for
from tide_e2e.operator_install import install_crd
from tide_operator.api import GROUP, PLURAL, VERSION
from tide_operator.cli.kube import tide_events
from tide_operator.cli.timeline import PROMOTION, ROLLBACK, Queries, build_timeline, prometheus_query_range

pytestmark = pytest.mark.integration

PROMOTE_AT_S, SPEC_OFF_S, SPEC_ON_S = 10, 18, 24
# The pod's metrics: counters integrate the rates of the phase the pod is in (its own clock).
METRICS_POD = """
import http.server, os, time
T0 = time.time()
def on_seconds(e):
    return min(e, SPEC_OFF) + max(0.0, e - SPEC_ON)
def body():
    e = time.time() - T0
    spec = on_seconds(e)
    v1 = min(spec, PROMOTE_AT)
    drafts, accepted = 10 * spec, 13 * v1 + 18 * (spec - v1)
    on = 0 if SPEC_OFF <= e < SPEC_ON else 1
    version = "v1" if e < PROMOTE_AT else "v2"
    labels = 'model_name="chat",engine="0"'
    return "\\n".join([
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}",
        f"vllm:num_requests_running{{{labels}}} {4 + int(e) % 12}",
        f'tide_speculation_enabled{{model_name="chat"}} {on}',
        f'tide_draft_info{{model_name="chat",version="{version}",target_revision="r1"}} 1',
    ]) + "\\n"
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        data = body().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
http.server.HTTPServer((os.environ["POD_IP"], 8000), Handler).serve_forever()
""".replace("PROMOTE_AT", str(PROMOTE_AT_S)).replace("SPEC_OFF", str(SPEC_OFF_S)).replace("SPEC_ON", str(SPEC_ON_S))

SPEC = {
    "target": {"model": "meta-llama/Llama-3.1-8B", "revision": "0e9e39f", "servedModelName": "chat"},
    "draft": {"method": "eagle3", "initial": "s3://drafts/base", "numSpeculativeTokens": 3},
    "inference": {"replicas": 1, "gpusPerReplica": 1},
    "storage": {"s3": {"bucket": "tide"}},
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status() -> dict:
    ready = {"type": "Ready", "status": "True", "reason": "ReplicasReady", "message": "1/1 ready",
             "lastTransitionTime": _now(), "observedGeneration": 1}
    return {"phase": "Serving", "observedGeneration": 1, "conditions": [ready],
            "inferencePool": {"gpuClass": "H100", "nodes": 2, "replicas": 1, "replicasReady": 1},
            "draft": {"current": "v2", "servedRevision": "0e9e39f"},
            "speculation": {"enabled": True, "numSpeculativeTokens": 3, "acceptanceLengthMilli": 2800,
                            "modelledSpeedupPercent": 141},
            "lastDecision": {"time": _now(), "action": "Promote", "reason": "Promoted", "message": "v2 beat v1"}}


def _metrics_pod(namespace: str) -> dict:
    return {
        "metadata": {"name": "chat-vllm-0", "namespace": namespace,
                     "labels": {"tide.dev/deployment": "chat", "app.kubernetes.io/component": "inference"},
                     "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8000",
                                     "prometheus.io/path": "/metrics"}},
        "spec": {"containers": [{
            "name": "vllm", "image": "vllm-stand-in", "command": [sys.executable, "-c", METRICS_POD],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "http", "containerPort": 8000}]}]},
    }


def _event(namespace: str, uid: str, reason: str, message: str, kind: str = "Normal") -> dict:
    now = _now()
    return {"metadata": {"generateName": "chat-", "namespace": namespace},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "name": "chat",
                               "namespace": namespace, "uid": uid},
            "reason": reason, "message": message, "type": kind, "source": {"component": "tide-operator"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}


def _samples(prometheus_url: str, namespace: str) -> float:
    query = f'count_over_time(vllm:spec_decode_num_drafts_total{{namespace="{namespace}"}}[2m])'
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    result = json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


@pytest.fixture
def scripted_deployment(plane, kube, namespace):
    """A TideDeployment with status and Events, and ~35 s of its pod's metrics in Prometheus."""
    install_crd(kube)
    custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": "chat"}, "spec": SPEC}
    uid = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)["metadata"]["uid"]
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "chat", {"status": _status()})
    core.create_namespaced_pod(namespace, _metrics_pod(namespace))
    wait_for(lambda: _samples(plane.prometheus_url, namespace) > 0, "the first scrape of the metrics pod")
    started = time.monotonic()
    time.sleep(PROMOTE_AT_S)
    core.create_namespaced_event(namespace, _event(namespace, uid, "Promoted", "Promote: v2 beat v1 by 9%"))
    time.sleep(SPEC_ON_S + 4 - PROMOTE_AT_S)
    core.create_namespaced_event(namespace, _event(namespace, uid, "CanaryAborted", "RollBack: r3 lost 6%", "Warning"))
    time.sleep(max(0.0, SPEC_ON_S + 10 - (time.monotonic() - started)))
    return namespace


def _cli(plane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tide_operator.cli", "--kubeconfig", plane.kubeconfig, *args],
                          check=False, capture_output=True, text=True, timeout=120)


def test_status_and_plot_against_the_plane(plane, kube, scripted_deployment, tmp_path: Path) -> None:
    check_status(plane, scripted_deployment)
    check_plot(plane, kube, scripted_deployment, tmp_path / "chat.png")
    check_get(plane, kube, scripted_deployment)
    check_verbs(plane, kube, scripted_deployment)


def check_get(plane, kube, namespace: str) -> None:
    table = _cli(plane, "get", "-n", namespace)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "READY", "PHASE", "DRAFT", "SPECULATION", "ACCEPTANCE", "AGE"]
    assert row.split()[:7] == ["chat", "1/1", "Serving", "v2", "on", "(g=3)", "2.80"]
    everywhere = _cli(plane, "get", "-A", "-o", "wide")
    assert any(line.split()[:2] == [namespace, "chat"] for line in everywhere.stdout.splitlines()), everywhere.stdout
    listed = json.loads(_cli(plane, "get", "-n", namespace, "-o", "json").stdout)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["chat"]
    # --watch: the list, then one row per change the API server streams (here a status patch).
    watch = subprocess.Popen([sys.executable, "-m", "tide_operator.cli", "--kubeconfig", plane.kubeconfig, "get",
                              "chat", "-n", namespace, "--watch", "--watch-timeout", "8s"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert watch.stdout is not None
    first = [watch.stdout.readline(), watch.stdout.readline()]  # the list (flushed before the watch starts)
    time.sleep(2)
    client.CustomObjectsApi(kube).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "chat", {"status": {"phase": "Collecting"}})
    out, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    phases = [line.split()[2] for line in [*first, *out.splitlines()][1:]]
    assert phases[0] == "Serving"
    assert "Collecting" in phases
    client.CustomObjectsApi(kube).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "chat", {"status": {"phase": "Serving"}})


def check_verbs(plane, kube, namespace: str) -> None:
    def control() -> dict:
        obj = client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
        return obj["spec"].get("control") or {}

    pause = _cli(plane, "pause", "chat", "-n", namespace)
    assert pause.returncode == 0, pause.stderr
    # The CRD defaults spec.control.paused to false: the API server stored it so.
    assert pause.stdout == f"tidedeployment {namespace}/chat: spec.control.paused false -> true\n"
    assert control()["paused"] is True
    assert "nothing changed" in _cli(plane, "pause", "chat", "-n", namespace).stdout
    assert _cli(plane, "resume", "chat", "-n", namespace).returncode == 0
    assert control()["paused"] is False
    pin = _cli(plane, "pin", "chat", "v2", "-n", namespace)
    assert pin.returncode == 0, pin.stderr
    assert control()["draftPin"] == "v2"
    refused = _cli(plane, "pin", "chat", "latest", "-n", namespace)
    assert (refused.returncode, refused.stderr.count("\n")) == (1, 1), refused.stderr
    assert "spec.control.draftPin" in refused.stderr
    assert _cli(plane, "unpin", "chat", "-n", namespace).returncode == 0
    assert "draftPin" not in control()
    rotate = _cli(plane, "rotate-token", "chat", "-n", namespace)
    assert rotate.returncode == 0, rotate.stderr
    obj = client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
    assert obj["metadata"]["annotations"]["tide.dev/rotate-token"].isdigit()
    missing = _cli(plane, "pause", "nope", "-n", namespace)
    assert (missing.returncode, missing.stderr) == (1, f"tide: TideDeployment {namespace}/nope not found\n")


def check_status(plane, scripted_deployment: str) -> None:
    run = _cli(plane, "status", "chat", "-n", scripted_deployment)  # kubectl-style option order
    assert run.returncode == 0, run.stderr
    assert f"TideDeployment {scripted_deployment}/chat: phase Serving" in run.stdout
    assert "Draft:           current v2 (target revision 0e9e39f)" in run.stdout
    assert "acceptance length 2.80 tokens/step, modelled speedup 1.41x" in run.stdout
    assert "Last decision:   Promote (Promoted)" in run.stdout
    assert "RollBack: r3 lost 6%" in run.stdout
    missing = _cli(plane, "-n", scripted_deployment, "status", "nope")
    assert missing.returncode == 1
    assert "not found" in missing.stderr


def check_plot(plane, kube, scripted_deployment: str, out: Path) -> None:
    end = time.time()
    start = end - 90
    queries = Queries(scripted_deployment, "chat", "8s")
    timeline = build_timeline(queries, prometheus_query_range(plane.prometheus_url, start, end, 2),
                              tide_events(kube, scripted_deployment, "chat"), start, end)
    lengths = {s.label: [v for _, v in s.points] for s in timeline.acceptance_length}
    assert set(lengths) == {"draft v1", "draft v2"}
    assert max(lengths["draft v1"]) == pytest.approx(2.3, abs=0.15)
    assert max(lengths["draft v2"]) == pytest.approx(2.8, abs=0.15)
    assert {v for s in timeline.speculation for _, v in s.points} == {0.0, 1.0}
    assert all(4 <= v <= 15 for s in timeline.batch_size for _, v in s.points)
    assert [m.kind for m in timeline.markers] == [PROMOTION, ROLLBACK]

    run = _cli(plane, "-n", scripted_deployment, "plot", "chat", "--prometheus", plane.prometheus_url,
               "--since", "90s", "--step", "2s", "--rate-window", "8s", "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
