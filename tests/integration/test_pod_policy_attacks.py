"""An attack campaign on the real control plane: TideDeployments that each try one escalation through
the pod spec (issue 12, items 2-3). Every one must end Invalid naming the field, with a Warning Event,
and nothing may be created for it: no Deployment, pod, Service, ConfigMap, Secret or Job.

Adoption of pre-existing children (item 4) and removed overrides leaving the pod (item 5) are not
covered here yet; docs/security.md lists them as not yet done.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from tests.integration.kubewait import events_where, wait_for
from tide_e2e.operator_install import TEST_OPERATOR_CONFIG, OperatorProcess, grant_operator_rbac, install_crd
from tide_operator.api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

OPERATOR_ACCOUNT = "tide-operator"
SPEC: dict[str, Any] = {
    "target": {"model": "meta-llama/Llama-3.1-8B", "revision": "0e9e39f"},
    "inference": {"replicas": 1},
    "storage": {"s3": {"bucket": "tide"}},
}
OVR = "spec.inference.podTemplateOverride"


def _pod(**fields: Any) -> dict[str, Any]:
    return {"inference": {"podTemplateOverride": {"spec": fields}}}


def _vllm(**fields: Any) -> dict[str, Any]:
    return _pod(containers=[{"name": "vllm", **fields}])


# (attack, spec sections merged into SPEC, the field the Ready condition must name)
ATTACKS = [
    ("privileged", _vllm(securityContext={"privileged": True}), f"{OVR}.spec.containers[0].securityContext"),
    ("added capability", _vllm(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
     f"{OVR}.spec.containers[0].securityContext"),
    ("runAsUser 0", _pod(securityContext={"runAsUser": 0}), f"{OVR}.spec.securityContext"),
    ("hostNetwork", _pod(hostNetwork=True), f"{OVR}.spec.hostNetwork"),
    ("hostPID", _pod(hostPID=True), f"{OVR}.spec.hostPID"),
    ("hostIPC", _pod(hostIPC=True), f"{OVR}.spec.hostIPC"),
    ("hostPath", _pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]), f"{OVR}.spec.volumes[0].hostPath"),
    ("extra container", _pod(containers=[{"name": "vllm"}, {"name": "miner", "image": "x"}]),
     f"{OVR}.spec.containers[1]"),
    ("init container", _pod(initContainers=[{"name": "i", "image": "x"}]), f"{OVR}.spec.initContainers"),
    ("nodeName", _pod(nodeName="h100-0"), f"{OVR}.spec.nodeName"),
    ("node affinity", _pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Exists"}]}]}}}),
     f"{OVR}.spec.affinity.nodeAffinity"),
    ("procMount", _vllm(securityContext={"procMount": "Unmasked"}), f"{OVR}.spec.containers[0].securityContext"),
    ("sysctls", _pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
     f"{OVR}.spec.securityContext"),
    ("container image", _vllm(image="docker.io/someone/miner:1"), f"{OVR}.spec.containers[0].image"),
    ("image outside the allowlist", {"inference": {"image": "docker.io/someone/vllm:latest"}}, "spec.inference.image"),
    ("trainer image", {"training": {"image": "docker.io/someone/trainer:1"}}, "spec.training.image"),
    ("priority class", {"inference": {"priorityClassName": "system-cluster-critical"}},
     "spec.inference.priorityClassName"),
    ("operator's service account", {"inference": {"serviceAccountName": OPERATOR_ACCOUNT}},
     "spec.inference.serviceAccountName"),
    ("toleration of every taint", {"inference": {"tolerations": [{"operator": "Exists"}]}},
     "spec.inference.tolerations[0].key"),
    ("GPU count", _vllm(resources={"limits": {"nvidia.com/gpu": 8}}),
     f"{OVR}.spec.containers[0].resources.limits['nvidia.com/gpu']"),
]


@pytest.fixture(scope="module")
def operator(plane, kube):
    install_crd(kube)
    grant_operator_rbac(kube)
    config = {**TEST_OPERATOR_CONFIG, "podPolicy": {"operatorServiceAccount": OPERATOR_ACCOUNT}}
    process = OperatorProcess(plane, config).start()
    yield process
    process.stop()


def _spec(sections: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    for name, values in sections.items():
        spec[name] = {**spec.get(name, {}), **copy.deepcopy(values)}
    return spec


def _refused(kube, namespace: str, name: str, field: str) -> bool:
    td = client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    status = td.get("status") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    return (status.get("phase") == "Invalid" and ready.get("reason") == "PodPolicyViolation"
            and ready.get("message", "").startswith(f"{field}:"))


def test_attacks_through_the_pod_spec_are_refused_and_create_nothing(kube, namespace, operator):
    objects, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    apps, batch = client.AppsV1Api(kube), client.BatchV1Api(kube)
    secrets_before = {s.metadata.name for s in core.list_namespaced_secret(namespace).items}
    for index, (_, sections, _) in enumerate(ATTACKS):
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment",
            "metadata": {"name": f"attack-{index}"}, "spec": _spec(sections)})

    refused = 0
    for index, (attack, _, field) in enumerate(ATTACKS):
        wait_for(lambda i=index, f=field: _refused(kube, namespace, f"attack-{i}", f) or None,
                 f"attack-{index} ({attack}) refused naming {field}")
        refused += 1
    attacked = {f"attack-{i}" for i in range(len(ATTACKS))}
    events_where(kube, namespace, lambda ws: {e.involved_object.name for e in ws if e.reason == "PodPolicyViolation"}
                 == attacked, "a PodPolicyViolation Warning for exactly each attack", selector="type=Warning")

    assert apps.list_namespaced_deployment(namespace).items == []
    assert core.list_namespaced_pod(namespace).items == []
    assert core.list_namespaced_service(namespace).items == []
    assert core.list_namespaced_config_map(namespace, label_selector="app.kubernetes.io/managed-by").items == []
    assert batch.list_namespaced_job(namespace).items == []
    assert {s.metadata.name for s in core.list_namespaced_secret(namespace).items} == secrets_before
    print(f"attacks refused: {refused}/{len(ATTACKS)}")
