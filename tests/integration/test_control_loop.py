"""The adaptive control loop end to end on the real control plane, with real Prometheus and S3.

The vLLM pods run the deterministic simulator (vLLM's command line, routes and metric names, and
the serving plugin's control routes); the operator reads acceptance and load from the plane's
real Prometheus, keeps state in status, and switches speculation on the pods through the control
routes. Scenarios (issue 4): good draft at low load -> on; load rises until verify cost makes it
lose -> off, without flapping; load falls -> on again; Prometheus unreachable -> decisions hold,
Degraded, recovery when it returns.
"""

from __future__ import annotations

import base64
import copy
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import wait_for
from tests.integration.promotion_flow import sim_operator_config
from tide_contracts.serving_control import DEFAULT_CONTROL_PORT, ServingControlClient
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_operator.api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

UNREACHABLE_PROMETHEUS = "http://127.0.0.1:9"
A = 0.6  # modelled speedup with the default cost profile: ~1.33x at batch 4, ~0.82x at batch 256


def scenario(background_running: int) -> dict:
    return {"seed": 3, "acceptance": {"initial": {"general": A}},
            "timeline": [{"at_s": 0, "domain": "general", "background_running": background_running}]}


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(4)))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file):
    install_crd(kube)
    grant_operator_rbac(kube)
    # The unreachable Prometheus of the Degraded scenario is a spec URL: the operator must allow it.
    config = {**sim_operator_config(scenario_file), "prometheus": {"allowedUrls": [UNREACHABLE_PROMETHEUS]}}
    process = OperatorProcess(plane, config).start()
    yield process
    process.stop()


def spec(bucket: str, endpoint: str, prometheus: str | None = None) -> dict:
    body = {
        "target": {"model": "tide-local/tiny", "revision": "r1", "servedModelName": "chat"},
        "draft": {"method": "eagle3", "initial": f"s3://{bucket}/seed-draft", "numSpeculativeTokens": 3},
        "inference": {"replicas": 2, "gpusPerReplica": 1},
        # On/off only here: per-batch-size tables are covered by the plugin's engine test and the simulator's.
        "control": {"interval": "5s", "decision": {"minDwell": "6s"}, "capture": {"enabled": False},
                    "adaptiveSpeculativeTokens": False},
        "storage": {"s3": {"bucket": bucket, "endpoint": endpoint, "credentialsSecret": "s3-creds"}},
    }
    if prometheus:
        body["prometheus"] = {"url": prometheus}
    return body


def create(kube, namespace: str, body: dict) -> None:
    client.CoreV1Api(kube).create_namespaced_secret(namespace, {
        "metadata": {"name": "s3-creds"}, "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}})
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": "chat"},
        "spec": copy.deepcopy(body)})


def events_of_chat(kube, namespace: str) -> list:
    return client.CoreV1Api(kube).list_namespaced_event(namespace, field_selector="involvedObject.name=chat").items


def status(kube, namespace: str) -> dict:
    return client.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "chat").get("status") or {}


def condition(st: dict, kind: str) -> dict:
    return next((c for c in st.get("conditions", []) if c["type"] == kind), {})


def speculation_is(kube, namespace: str, enabled: bool) -> dict | None:
    st = status(kube, namespace)
    spec_status = st.get("speculation") or {}
    ok = spec_status.get("enabled") is enabled and condition(st, "SpeculationEnabled").get("status") == str(enabled)
    return st if ok else None


def pods_speculating(kube, namespace: str) -> list[bool]:
    core = client.CoreV1Api(kube)
    secret = core.read_namespaced_secret("chat-control", namespace)
    token = base64.b64decode(secret.data["token"]).decode()
    pods = core.list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
    return [ServingControlClient(f"http://{p.status.pod_ip}:{DEFAULT_CONTROL_PORT}", token).status().speculation.enabled
            for p in pods if p.status.pod_ip and not p.metadata.deletion_timestamp and any(
                c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def serving_pod_names(kube, namespace: str) -> set[str]:
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
    return {p.metadata.name for p in pods if not p.metadata.deletion_timestamp and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])}


def test_speculation_follows_load_without_flapping(kube, namespace, operator, s3, s3_endpoint, scenario_file):
    s3.create_bucket(Bucket="tide-load")
    create(kube, namespace, spec("tide-load", s3_endpoint))

    # 1. A good draft at low load: speculation on, with the modelled speedup in status.
    def measured_on():
        st = speculation_is(kube, namespace, True)
        return st if st and "modelledSpeedupPercent" in st["speculation"] else None

    # The draft is switched on to be measured, then kept on once its measured acceptance pays.
    st = wait_for(measured_on, "speculation on at low load, with a measured acceptance", timeout_s=120)
    assert st["speculation"]["modelledSpeedupPercent"] > 105
    assert abs(st["speculation"]["acceptanceLengthMilli"] - 1000 * (1 + A + A**2 + A**3)) < 100
    assert condition(st, "Degraded").get("status") == "False"

    # 2. Load rises until verify cost makes speculation lose: off on every pod.
    scenario_file.write_text(yaml.safe_dump(scenario(256)))
    st = wait_for(lambda: speculation_is(kube, namespace, False), "speculation off at high load", timeout_s=120)
    assert st["lastDecision"]["action"] == "SetSpeculation"
    wait_for(lambda: pods_speculating(kube, namespace) == [False, False], "pods switched off", timeout_s=30)
    flipped_at = condition(st, "SpeculationEnabled")["lastTransitionTime"]
    time.sleep(15)  # three control intervals at a steady high load: no flapping
    assert condition(status(kube, namespace), "SpeculationEnabled")["lastTransitionTime"] == flipped_at

    # A pod that starts now (a crash, a drain) comes up speculating: the operator switches it off too.
    before = serving_pod_names(kube, namespace)
    client.CoreV1Api(kube).delete_namespaced_pod(sorted(before)[0], namespace, grace_period_seconds=0)
    replacement = wait_for(lambda: (serving_pod_names(kube, namespace) - before) or None, "a replacement pod",
                           timeout_s=60).pop()
    wait_for(lambda: pods_speculating(kube, namespace) == [False, False], "the new pod switched off", timeout_s=60)
    # The pod is switched mid-pass; Kopf posts the pass's Events after it, in the background.
    wait_for(lambda: any(e.reason == "PodsConverged" and f"{replacement}: speculation off" in e.message
                         for e in events_of_chat(kube, namespace)), "a PodsConverged Event naming it", timeout_s=30)

    # 3. Load falls: on again.
    scenario_file.write_text(yaml.safe_dump(scenario(4)))
    wait_for(lambda: speculation_is(kube, namespace, True), "speculation back on", timeout_s=120)
    wait_for(lambda: pods_speculating(kube, namespace) == [True, True], "pods switched on", timeout_s=30)
    wait_for(lambda: sum(1 for e in events_of_chat(kube, namespace) if "SetSpeculation" in (e.message or "")) >= 2,
             "two SetSpeculation Events", timeout_s=30)


def test_prometheus_unreachable_holds_decisions_and_recovers(kube, namespace, operator, plane, s3, s3_endpoint):
    s3.create_bucket(Bucket="tide-blind")
    create(kube, namespace, spec("tide-blind", s3_endpoint, prometheus=UNREACHABLE_PROMETHEUS))

    def degraded():
        st = status(kube, namespace)
        return st if condition(st, "Degraded").get("reason") == "PrometheusUnreachable" else None

    st = wait_for(degraded, "Degraded=True/PrometheusUnreachable", timeout_s=120)
    assert condition(st, "Degraded")["status"] == "True"
    assert st["phase"] == "Serving"  # the fleet keeps serving as it was
    assert "speculation" not in st  # no decision was made on missing data

    client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "chat", {"spec": {"prometheus": {"url": plane.prometheus_url}}})
    st = wait_for(lambda: speculation_is(kube, namespace, True), "recovery once Prometheus answers", timeout_s=120)
    assert condition(st, "Degraded")["status"] == "False"
