"""Control-token rotation on the real control plane: the pods re-read the mounted Secret, no restart.

The serving pods (the simulator, which reads its token the way the plugin does) mount the
control-token Secret; the process kubelet keeps the volume's files current. A new value of the
tide.dev/rotate-token annotation rotates the token once; the operator uses the new token at once and
falls back to the previous one while kubelets catch up; after the grace the old token is refused.
A Secret deleted by hand is recreated and picked up the same way.
"""

from __future__ import annotations

import base64
import time

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import wait_for
from tests.integration.promotion_flow import sim_operator_config
from tests.integration.test_control_loop import condition, create, scenario, spec, status
from tide_contracts.serving_control import DEFAULT_CONTROL_PORT, ServingControlClient, ServingControlError
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_operator.api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration
GRACE_S = 10


@pytest.fixture(scope="module")
def operator(plane, kube, tmp_path_factory):
    scenario_file = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario(4)))
    install_crd(kube)
    grant_operator_rbac(kube)
    config = sim_operator_config(scenario_file, tokenRotationGraceSeconds=GRACE_S)
    process = OperatorProcess(plane, config).start()
    yield process
    process.stop()


def _secret(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    data = core.read_namespaced_secret("chat-control", namespace).data or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def _ready_pods(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
    return [p for p in pods if p.status.pod_ip and not p.metadata.deletion_timestamp and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def _answers(pods: list[client.V1Pod], token: str) -> list[object]:
    """Per pod: does its control port accept ``token`` now?"""
    out = []
    for p in pods:
        try:
            ServingControlClient(f"http://{p.status.pod_ip}:{DEFAULT_CONTROL_PORT}", token, timeout_s=5).status()
            out.append(True)
        except ServingControlError as e:
            out.append(False if e.status == 401 else e)  # anything but a 401 fails the comparison, shown
    return out


def _identity(pods: list[client.V1Pod]) -> dict[str, int]:
    return {p.metadata.uid: sum(c.restart_count for c in p.status.container_statuses or []) for p in pods}


def _healthy_for(kube, namespace: str, seconds: float) -> None:
    """The operator's passes keep reaching every pod (Degraded stays False) for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        st = status(kube, namespace)
        assert condition(st, "Degraded").get("status") == "False", condition(st, "Degraded")
        time.sleep(1)


def test_a_rotated_or_recreated_token_reaches_running_pods_without_a_restart(kube, namespace, operator, s3,
                                                                             s3_endpoint):
    s3.create_bucket(Bucket="tide-rotate")
    create(kube, namespace, spec("tide-rotate", s3_endpoint))
    core = client.CoreV1Api(kube)
    wait_for(lambda: len(_ready_pods(core, namespace)) == 2 and condition(status(kube, namespace), "Degraded")
             .get("status") == "False", "two ready pods, the operator reaching them", timeout_s=120)
    pods = _ready_pods(core, namespace)
    before, old = _identity(pods), _secret(core, namespace)["token"]
    assert _answers(pods, old) == [True, True]

    # 1. Rotation on the annotation: a new token with the old one kept for the grace period.
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "chat", {"metadata": {"annotations": {"tide.dev/rotate-token": "r1"}}})
    rotated = wait_for(lambda: (s := _secret(core, namespace))["token"] != old and s, "the token rotated",
                       timeout_s=30)
    assert rotated["previous-token"] == old
    new = rotated["token"]
    wait_for(lambda: _answers(pods, new) == [True, True], "the pods accept the new token", timeout_s=30)
    assert _answers(pods, old) == [True, True]  # still, during the grace

    # 2. After the grace the operator holds only the new token, and its calls keep succeeding.
    wait_for(lambda: "previous-token" not in _secret(core, namespace), "the previous token dropped",
             timeout_s=GRACE_S + 30)
    wait_for(lambda: _answers(pods, old) == [False, False], "the old token refused", timeout_s=30)
    _healthy_for(kube, namespace, 8)
    assert _secret(core, namespace)["token"] == new  # the same annotation value never rotates twice

    # 3. A Secret deleted by hand is recreated (no previous token to fall back to) and picked up live.
    core.delete_namespaced_secret("chat-control", namespace)
    recreated = wait_for(lambda: _try_secret(core, namespace, new), "the Secret recreated", timeout_s=30)
    wait_for(lambda: _answers(pods, recreated) == [True, True], "the pods accept the recreated token", timeout_s=30)
    wait_for(lambda: condition(status(kube, namespace), "Degraded").get("status") == "False",
             "the operator reaching the pods again", timeout_s=30)
    _healthy_for(kube, namespace, 6)
    assert _identity(_ready_pods(core, namespace)) == before  # same pods, never restarted
    print(f"token rotation: rotated and recreated, pods {sorted(before)} never restarted")


def _try_secret(core: client.CoreV1Api, namespace: str, not_this: str) -> str | None:
    try:
        token = _secret(core, namespace).get("token")
    except client.ApiException:
        return None
    return token if token and token != not_this else None
