"""The process kubelet honours pod readiness gates, as the real kubelet does.

Against the real kube-apiserver: a pod whose spec.readinessGates names tide.dev/serving stays not
Ready while its containers are ready, goes Ready once its gate condition is patched True on pods/status
(as the operator does), and leaves service again when it is patched False. The kubelet's own status
patches leave the gate condition in place.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.kubewait import wait_for

pytestmark = pytest.mark.integration

GATE = "tide.dev/serving"
PROMPT_S = 10.0  # the kubelet polls pods every 0.5 s and reports every 0.25 s: a flip shows in about a second


def gated_pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {
        "readinessGates": [{"conditionType": GATE}], "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "python:3.11", "command": ["sleep", "600"]}]}}


def conditions(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, client.V1PodCondition]:
    return {c.type: c for c in core.read_namespaced_pod_status(name, namespace).status.conditions or []}


def ready_is(core: client.CoreV1Api, namespace: str, name: str, status: str) -> dict | None:
    seen = conditions(core, namespace, name)
    return seen if "Ready" in seen and seen["Ready"].status == status else None


def set_gate(core: client.CoreV1Api, namespace: str, name: str, status: str) -> client.V1Pod:
    condition = {"type": GATE, "status": status, "reason": "Test", "message": f"serving={status}"}
    return core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}})


def test_ready_waits_for_the_readiness_gate_and_follows_it(kube, namespace):
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, gated_pod("gated"))
    held = wait_for(lambda: (seen := conditions(core, namespace, "gated")).get("ContainersReady")
                    and seen["ContainersReady"].status == "True" and seen, "the gated pod's containers ready")
    assert (held["Ready"].status, held["Ready"].reason) == ("False", "ReadinessGatesNotReady")
    assert GATE not in held  # absent: the gate is closed

    patched = set_gate(core, namespace, "gated", "True")
    # The client sent a strategic merge patch (merged by type): the kubelet's conditions are still there.
    assert {"Initialized", "Ready", "ContainersReady", GATE} <= {c.type for c in patched.status.conditions}
    ready = wait_for(lambda: ready_is(core, namespace, "gated", "True"), "Ready once the gate is True",
                     timeout_s=PROMPT_S)
    assert ready["Ready"].reason is None
    # The kubelet's own report (Ready=True) left the operator's condition whole.
    assert (ready[GATE].status, ready[GATE].message) == ("True", "serving=True")

    set_gate(core, namespace, "gated", "False")
    out = wait_for(lambda: ready_is(core, namespace, "gated", "False"), "not Ready once the gate is False",
                   timeout_s=PROMPT_S)
    assert out["ContainersReady"].status == "True"  # the containers still run: only the gate took it out
    assert 'readiness gate "tide.dev/serving" is not "True"' in out["Ready"].message
