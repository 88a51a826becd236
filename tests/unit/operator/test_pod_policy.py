"""The pod policy refuses every escalation a TideDeployment could ask for, naming the field, and a
refused spec reaches phase Invalid with a Warning Event before anything in the cluster is touched."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tide_operator.api import parse_spec
from tide_operator.config import OperatorConfig, PodPolicyConfig, load_operator_config
from tide_operator.control.pod_policy import image_allowed, image_repository, pod_policy_violations
from tide_operator.reconcile import reconcile

BASE: dict[str, Any] = {
    "target": {"model": "meta-llama/Llama-3.1-8B", "revision": "0e9e39f"},
    "inference": {"replicas": 2},
    "storage": {"s3": {"bucket": "tide"}},
}
CONFIG = OperatorConfig(pod_policy=PodPolicyConfig(operator_service_account="tide-operator"))
INF, TRAIN = "spec.inference", "spec.training"
OVR = f"{INF}.podTemplateOverride"


def _spec(pool: str = "inference", **fields: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw.setdefault(pool, {}).update(fields)
    return raw


def _pod(spec_fields: dict[str, Any], pool: str = "inference") -> dict[str, Any]:
    return _spec(pool, podTemplateOverride={"spec": spec_fields})


def _vllm(**fields: Any) -> dict[str, Any]:
    return _pod({"containers": [{"name": "vllm", **fields}]})


# (case, raw spec, the field path the first violation names)
REFUSED = [
    ("privileged", _vllm(securityContext={"privileged": True}), f"{OVR}.spec.containers[0].securityContext"),
    ("added capability", _vllm(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
     f"{OVR}.spec.containers[0].securityContext"),
    ("run as root", _pod({"securityContext": {"runAsUser": 0}}), f"{OVR}.spec.securityContext"),
    ("runAsNonRoot false", _pod({"securityContext": {"runAsNonRoot": False}}), f"{OVR}.spec.securityContext"),
    ("procMount", _vllm(securityContext={"procMount": "Unmasked"}), f"{OVR}.spec.containers[0].securityContext"),
    ("sysctls", _pod({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
     f"{OVR}.spec.securityContext"),
    ("hostNetwork", _pod({"hostNetwork": True}), f"{OVR}.spec.hostNetwork"),
    ("hostPID", _pod({"hostPID": True}), f"{OVR}.spec.hostPID"),
    ("hostIPC", _pod({"hostIPC": True}), f"{OVR}.spec.hostIPC"),
    ("hostPath", _pod({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}), f"{OVR}.spec.volumes[0].hostPath"),
    ("extra container", _pod({"containers": [{"name": "vllm"}, {"name": "miner", "image": "x"}]}),
     f"{OVR}.spec.containers[1]"),
    ("init container", _pod({"initContainers": [{"name": "i", "image": "x"}]}), f"{OVR}.spec.initContainers"),
    ("ephemeral container", _pod({"ephemeralContainers": [{"name": "e"}]}), f"{OVR}.spec.ephemeralContainers"),
    ("nodeName", _pod({"nodeName": "h100-0"}), f"{OVR}.spec.nodeName"),
    ("node affinity", _pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Exists"}]}]}}}}),
     f"{OVR}.spec.affinity.nodeAffinity"),
    ("affinity deleted", _pod({"affinity": None}), f"{OVR}.spec.affinity"),
    ("container image", _vllm(image="evil.io/miner:1"), f"{OVR}.spec.containers[0].image"),
    ("container command", _vllm(command=["sh"]), f"{OVR}.spec.containers[0].command"),
    ("envFrom", _vllm(envFrom=[{"secretRef": {"name": "s"}}]), f"{OVR}.spec.containers[0].envFrom"),
    ("GPU count", _vllm(resources={"limits": {"nvidia.com/gpu": 8}}),
     f"{OVR}.spec.containers[0].resources.limits['nvidia.com/gpu']"),
    ("mount of an unknown volume", _vllm(volumeMounts=[{"name": "host", "mountPath": "/h"}]),
     f"{OVR}.spec.containers[0].volumeMounts[0].name"),
    ("mount propagation",
     _vllm(volumeMounts=[{"name": "dshm", "mountPath": "/x", "mountPropagation": "Bidirectional"}]),
     f"{OVR}.spec.containers[0].volumeMounts[0].mountPropagation"),
    ("toleration of any taint", _pod({"tolerations": [{"operator": "Exists"}]}), f"{OVR}.spec.tolerations[0].key"),
    ("toleration of a control-plane taint", _pod({"tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                                                                   "operator": "Exists"}]}),
     f"{OVR}.spec.tolerations[0].key"),
    ("priority class in override", _pod({"priorityClassName": "system-node-critical"}),
     f"{OVR}.spec.priorityClassName"),
    ("service account in override", _pod({"serviceAccountName": "tide-operator"}), f"{OVR}.spec.serviceAccountName"),
    ("hostUsers", _pod({"hostUsers": True}), f"{OVR}.spec.hostUsers"),
    ("AppArmor annotation", _spec(podTemplateOverride={"metadata": {"annotations": {
        "container.apparmor.security.beta.kubernetes.io/vllm": "unconfined"}}}),
     f"{OVR}.metadata.annotations['container.apparmor.security.beta.kubernetes.io/vllm']"),
    ("selector label", _spec(podTemplateOverride={"metadata": {"labels": {"tide.dev/deployment": "other"}}}),
     f"{OVR}.metadata.labels['tide.dev/deployment']"),
    ("pod name", _spec(podTemplateOverride={"metadata": {"name": "x"}}), f"{OVR}.metadata.name"),
    ("image outside the allowlist", _spec(image="docker.io/evil/vllm:1"), f"{INF}.image"),
    ("image look-alike", _spec(image="ghcr.io/tide-operator/vllm-tide-evil:1"), f"{INF}.image"),
    ("priority class", _spec(priorityClassName="system-cluster-critical"), f"{INF}.priorityClassName"),
    ("operator's service account", _spec(serviceAccountName="tide-operator"), f"{INF}.serviceAccountName"),
    ("typed toleration", _spec(tolerations=[{"operator": "Exists"}]), f"{INF}.tolerations[0].key"),
    ("control token file redirected", _vllm(env=[{"name": "TIDE_CONTROL_TOKEN_FILE", "value": "/tmp/mine"}]),
     f"{OVR}.spec.containers[0].env[0].name"),
    ("control port moved", _vllm(env=[{"name": "TIDE_CONTROL_PORT", "value": "8000"}]),
     f"{OVR}.spec.containers[0].env[0].name"),
    ("registry redirected", _vllm(env=[{"name": "TIDE_REGISTRY_URI", "value": "s3://other-team/x"}]),
     f"{OVR}.spec.containers[0].env[0].name"),
    ("control token volume replaced", _pod({"volumes": [{"name": "control-token", "secret": {"secretName": "mine"}}]}),
     f"{OVR}.spec.volumes[0].name"),
    ("API port on the control port", _spec(port=8081), f"{INF}.port"),
    ("trainer hostNetwork", _pod({"hostNetwork": True}, pool="training"),
     f"{TRAIN}.podTemplateOverride.spec.hostNetwork"),
    ("trainer image", _spec("training", image="docker.io/evil/trainer:1"), f"{TRAIN}.image"),
    ("trainer extra container", _pod({"containers": [{"name": "vllm"}]}, pool="training"),
     f"{TRAIN}.podTemplateOverride.spec.containers[0]"),
]


@pytest.mark.parametrize(("raw", "field"), [(raw, field) for _, raw, field in REFUSED],
                         ids=[case for case, _, _ in REFUSED])
def test_each_escalation_is_refused_naming_its_field(raw: dict[str, Any], field: str) -> None:
    refused = pod_policy_violations(parse_spec(raw), CONFIG)
    assert refused, "admitted"
    assert refused[0][0] == field, refused


def test_a_plain_spec_and_the_operators_own_images_are_admitted() -> None:
    assert pod_policy_violations(parse_spec(BASE), CONFIG) == []
    tuning = _vllm(env=[{"name": "TIDE_CAPTURE_SAMPLING_RATE", "value": "0.5"}, {"name": "HF_HOME", "value": "/c"}])
    assert pod_policy_violations(parse_spec(tuning), CONFIG) == []
    own = _spec(image="ghcr.io/tide-operator/vllm-tide:v0.34.0", tolerations=[{"key": "nvidia.com/gpu",
                                                                               "operator": "Exists"}])
    own["training"] = {"image": "ghcr.io/tide-operator/tide-trainer@sha256:" + "0" * 64,
                       "serviceAccountName": "chat-s3"}
    assert pod_policy_violations(parse_spec(own), CONFIG) == []


def test_every_violation_is_reported() -> None:
    raw = _pod({"hostNetwork": True, "hostPID": True, "nodeName": "n"})
    raw["inference"]["priorityClassName"] = "high"
    fields = [field for field, _ in pod_policy_violations(parse_spec(raw), CONFIG)]
    assert fields == [f"{INF}.priorityClassName", f"{OVR}.spec.hostNetwork", f"{OVR}.spec.hostPID",
                      f"{OVR}.spec.nodeName"]


def test_the_operator_configuration_widens_the_allowlists() -> None:
    config = load_operator_config({"podPolicy": {"allowedImagePrefixes": ["registry.corp:5000/llm/"],
                                                 "allowedPriorityClassNames": ["llm-serving"],
                                                 "allowedTolerationKeys": ["dedicated"]}})
    raw = _spec(image="registry.corp:5000/llm/vllm:2", priorityClassName="llm-serving",
                tolerations=[{"key": "dedicated", "operator": "Equal", "value": "llm"}])
    assert pod_policy_violations(parse_spec(raw), config) == []
    # Configured prefixes replace the defaults: the chart's images are then outside.
    assert pod_policy_violations(parse_spec(_spec(image="ghcr.io/tide-operator/vllm-tide:1")), config)


def test_default_toleration_keys_include_the_catalogs_resource_names() -> None:
    for key in ("nvidia.com/gpu", "amd.com/gpu"):
        assert pod_policy_violations(parse_spec(_spec(tolerations=[{"key": key, "operator": "Exists"}])), CONFIG) == []


@pytest.mark.parametrize(("image", "repository"), [
    ("ghcr.io/org/vllm:1", "ghcr.io/org/vllm"),
    ("registry:5000/vllm", "registry:5000/vllm"),
    ("registry:5000/vllm:2@sha256:abc", "registry:5000/vllm"),
    ("vllm", "vllm"),
])
def test_image_repository(image: str, repository: str) -> None:
    assert image_repository(image) == repository


def test_prefix_rules() -> None:
    assert image_allowed("corp.io/llm/a/b:1", ("corp.io/llm/",))
    assert not image_allowed("corp.io/llm-evil/a:1", ("corp.io/llm",))
    assert image_allowed("corp.io/llm:3", ("corp.io/llm",))


def test_the_example_needs_only_its_priority_class_allowed() -> None:
    document = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "tidedeployment.yaml").read_text())
    spec = parse_spec(document["spec"])
    assert [field for field, _ in pod_policy_violations(spec, CONFIG)] == [f"{INF}.priorityClassName"]
    allowing = load_operator_config({"podPolicy": {"allowedPriorityClassNames": ["llm-serving"]}})
    assert pod_policy_violations(spec, allowing) == []


class UntouchedCluster:
    """A refused spec must not reach the cluster at all: any call fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the pass touched cluster.{name}")


def test_a_refused_spec_is_invalid_with_a_warning_and_touches_nothing() -> None:
    body = {"metadata": {"name": "chat", "namespace": "llm", "generation": 4},
            "spec": _pod({"hostNetwork": True, "nodeName": "n"})}
    result = reconcile(body, UntouchedCluster(), CONFIG, adopt=lambda child: child)  # type: ignore[arg-type]
    assert result.status["phase"] == "Invalid"
    assert result.status["observedGeneration"] == 4
    ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodPolicyViolation")
    assert ready["message"].startswith(f"{OVR}.spec.hostNetwork: is not allowed in podTemplateOverride")
    assert ready["message"].endswith(f"also refused: {OVR}.spec.nodeName")
    (event,) = result.events
    assert (event.type, event.reason) == ("Warning", "PodPolicyViolation")
    assert f"{OVR}.spec.hostNetwork" in event.message
    assert result.applied == ()
