"""Every pod the operator renders satisfies the Restricted Pod Security profile, with and without the
overrides the pod policy admits; an override cannot loosen the security contexts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from manifest_fixtures import placement, spec_with
from pod_security_standards import RULES, violations

from tide_operator.config import OperatorConfig, ServingConfig, TrainerConfig
from tide_operator.control.pod_policy import pod_policy_violations
from tide_operator.manifests.serving import build_serving_deployment
from tide_operator.manifests.trainer import build_trainer_job

CONFIG = OperatorConfig()
READ_ONLY = OperatorConfig(serving=ServingConfig(read_only_root_filesystem=True),
                           trainer=TrainerConfig(read_only_root_filesystem=True))
WRITABLE = OperatorConfig(trainer=TrainerConfig(read_only_root_filesystem=False))

# podTemplateOverrides the default pod policy admits, for either pool ({container} is its name).
ALLOWED_OVERRIDES: dict[str, dict[str, Any]] = {
    "labels and annotations": {"metadata": {"labels": {"team": "llm"},
                                            "annotations": {"owner": "llm", "prometheus.io/path": None}}},
    "env and resources": {"spec": {"containers": [{"name": "{container}", "env": [
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
        "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "80Gi"}}}]}},
    "volumes and mounts": {"spec": {
        "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}},
                    {"name": "conf", "configMap": {"name": "vllm-conf"}},
                    {"name": "creds", "secret": {"secretName": "creds"}},
                    {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}],
        "containers": [{"name": "{container}", "volumeMounts": [
            {"name": "cache", "mountPath": "/cache"}, {"name": "conf", "mountPath": "/conf", "readOnly": True},
            {"name": "creds", "mountPath": "/creds", "readOnly": True},
            {"name": "scratch", "mountPath": "/scratch"}]}]}},
    "gpu tolerations": {"spec": {"tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "amd.com/gpu", "operator": "Exists"}]}},
    "pod anti-affinity and node selector": {"spec": {
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                "labelSelector": {"matchLabels": {"team": "llm"}}}}]}},
        "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}},
    "service account token asked for": {"spec": {"automountServiceAccountToken": True}},
}


def _for(container: str, override: Any) -> Any:
    if isinstance(override, dict):
        return {k: _for(container, v) for k, v in override.items()}
    if isinstance(override, list):
        return [_for(container, v) for v in override]
    return container if override == "{container}" else override


def _serving(override: dict[str, Any] | None = None, config: OperatorConfig = CONFIG) -> dict[str, Any]:
    spec = spec_with(inference={"podTemplateOverride": _for("vllm", override)} if override else {})
    return build_serving_deployment("chat", "llm", spec, placement(), config)


def _trainer(override: dict[str, Any] | None = None, config: OperatorConfig = CONFIG,
             gpus: int = 4) -> dict[str, Any]:
    training: dict[str, Any] = {"gpusPerJob": gpus}
    if override:
        training["podTemplateOverride"] = _for("trainer", override)
    return build_trainer_job("chat", "llm", spec_with(training=training), placement(), run_id="r1",
                             operator_config=config)


@pytest.mark.parametrize("config", [CONFIG, READ_ONLY, WRITABLE], ids=["default", "read-only", "writable"])
def test_default_pods_are_restricted(config: OperatorConfig) -> None:
    assert violations(_serving(config=config)) == []
    assert violations(_trainer(config=config)) == []
    assert violations(_trainer(config=config, gpus=1)) == []


@pytest.mark.parametrize("override", ALLOWED_OVERRIDES.values(), ids=ALLOWED_OVERRIDES.keys())
def test_pods_with_admitted_overrides_are_restricted(override: dict[str, Any]) -> None:
    for pool, container, build in (("inference", "vllm", _serving), ("training", "trainer", _trainer)):
        spec = spec_with(**{pool: {"podTemplateOverride": _for(container, override)}})
        assert pod_policy_violations(spec, CONFIG) == [], pool
        assert violations(build(override)) == [], pool


def test_security_contexts_are_the_restricted_ones() -> None:
    for pod in (_serving()["spec"]["template"]["spec"], _trainer()["spec"]["template"]["spec"]):
        assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        (container,) = pod["containers"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False


def test_read_only_root_filesystem_is_its_own_setting_with_a_writable_tmp() -> None:
    serving, trainer = _serving()["spec"]["template"]["spec"], _trainer()["spec"]["template"]["spec"]
    # vLLM writes caches under HOME and /tmp: writable by default; the trainer only its work dir and /tmp.
    assert serving["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    assert trainer["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in trainer["containers"][0]["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in trainer["volumes"]
    assert "tmp" not in {v["name"] for v in serving["volumes"]}
    read_only = _serving(config=READ_ONLY)["spec"]["template"]["spec"]
    assert read_only["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in read_only["containers"][0]["volumeMounts"]


LOOSENING = {"spec": {
    "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "seccompProfile": {"type": "Unconfined"}},
    "containers": [{"name": "{container}", "securityContext": {
        "privileged": True, "allowPrivilegeEscalation": True, "capabilities": {"add": ["SYS_ADMIN"]}}}],
    "initContainers": [{"name": "setup", "image": "busybox", "securityContext": {"runAsUser": 0}}],
}}


def test_security_contexts_are_reasserted_after_the_override_merge() -> None:
    # The pod policy refuses this spec; were it bypassed, the rendered pods would still be restricted.
    for build in (_serving, _trainer):
        assert violations(build(LOOSENING)) == []


def test_the_checker_catches_each_loosening() -> None:
    # The checker itself is tested: the same pod without the re-assertion fails the rules it should.
    pod = _serving(LOOSENING)
    template = pod["spec"]["template"]["spec"]
    template["securityContext"] = {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}}
    template["containers"][0]["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}
    template.update(hostNetwork=True, volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    found = {v.split(":")[0] for v in violations(pod)}
    assert found >= {"baseline/Host Namespaces", "baseline/Privileged Containers", "baseline/Capabilities",
                     "baseline/HostPath Volumes", "baseline/Seccomp", "restricted/Volume Types",
                     "restricted/Privilege Escalation", "restricted/Running as Non-root",
                     "restricted/Running as Non-root user", "restricted/Seccomp", "restricted/Capabilities"}


BAD_PODS = [
    ("baseline/HostProcess", {"securityContext": {"windowsOptions": {"hostProcess": True}}}),
    ("baseline/Host Ports", {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
    ("baseline/SELinux", {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
    ("baseline//proc Mount Type", {"containers": [{"name": "c", "securityContext": {"procMount": "Unmasked"}}]}),
    ("baseline/Sysctls", {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
    ("restricted/Non-root groups", {"securityContext": {"fsGroup": 0}}),
    ("restricted/Capabilities (add)", {"containers": [{"name": "c", "securityContext": {
        "capabilities": {"add": ["CHOWN"], "drop": ["ALL"]}}}]}),
    ("baseline/AppArmor", {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
]


@pytest.mark.parametrize(("control", "loosened"), BAD_PODS, ids=[c for c, _ in BAD_PODS])
def test_each_remaining_rule_fails_its_pod(control: str, loosened: dict[str, Any]) -> None:
    deployment = _serving()
    template = deployment["spec"]["template"]["spec"]
    for key, value in loosened.items():
        if key == "containers":
            value[0]["securityContext"] = {**template["containers"][0]["securityContext"],
                                           **value[0].get("securityContext", {})}
        template[key] = value if key == "containers" else {**template.get(key, {}), **value}
    assert any(v.startswith(control + ":") for v in violations(deployment)), violations(deployment)


def test_the_table_covers_the_published_controls() -> None:
    assert len({(rule.level, rule.control) for rule in RULES}) == len(RULES) == 19


REPO = Path(__file__).resolve().parents[3]
POD_IMAGES = [REPO / "images" / f"{name}.Dockerfile"
              for name in ("serving", "serving-rocm", "serving-cpu", "trainer", "trainer-rocm")]
POD_IMAGES.append(REPO / "e2e" / "kind" / "serving-tiny.Dockerfile")


@pytest.mark.parametrize("dockerfile", POD_IMAGES, ids=lambda p: p.name)
def test_pod_images_run_as_a_numeric_non_root_user(dockerfile: Path) -> None:
    # runAsNonRoot makes the kubelet refuse an image whose user is root or a name it cannot check.
    users = [line.split()[1] for line in dockerfile.read_text().splitlines() if line.startswith("USER ")]
    assert users, "no USER: the image runs as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), users[-1]
    assert int(uid) != 0
    text = dockerfile.read_text()
    if "FROM ${BASE_IMAGE}" not in text:  # images built FROM one of these inherit its HOME
        assert "HOME=/home/nonroot" in text  # the user's own, writable: caches go there
