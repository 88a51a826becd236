"""The pod policy: what a TideDeployment may ask of the pods the operator runs for it (pure).

A TideDeployment must never grant more than its author could create directly. CEL cannot see
inside ``podTemplateOverride`` (preserve-unknown-fields) and the namespace's Pod Security level may
be looser than the platform team wants for GPU pods, so this check is the control. Every rule is an
allowlist: a key the table does not name is refused. Each violation names the field path users see
in their YAML (``spec.inference.podTemplateOverride.spec.hostNetwork``). docs/security.md has the
threat model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.api.spec_workload import PodScheduling
from tide_operator.config import OperatorConfig
from tide_operator.manifests import pod
from tide_operator.manifests.labels import DEPLOYMENT_LABEL
from tide_operator.manifests.serving import CONTAINER_NAME as SERVING_CONTAINER
from tide_operator.manifests.serving import CONTROL_TOKEN_VOLUME
from tide_operator.manifests.trainer import CONTAINER_NAME as TRAINER_CONTAINER
from tide_operator.manifests.trainer import WORK_VOLUME

Violation = tuple[str, str]  # (field path, message), like api.spec_rules.Problem

# (spec field of the pool, the one container an override may touch)
POOLS = (("inference", SERVING_CONTAINER), ("training", TRAINER_CONTAINER))
VOLUME_SOURCES = ("configMap", "secret", "emptyDir", "persistentVolumeClaim")
# Selector labels: an override changing them would detach the pods from their Deployment.
RESERVED_LABEL_PREFIXES = (DEPLOYMENT_LABEL.split("/")[0] + "/", "app.kubernetes.io/component")
# The serving and trainer contracts' variables are the operator's: an override could point a pod at
# another control port, token file or registry. Capture tuning stays open to the spec's author.
OPERATOR_ENV_PREFIXES = ("TIDE_",)
OPERATOR_ENV_NAMES = frozenset({"POD_IP", "VLLM_PLUGINS"})
TUNABLE_ENV_NAMES = frozenset({"TIDE_CAPTURE_SAMPLING_RATE", "TIDE_CAPTURE_BUFFER_TOKENS", "TIDE_CAPTURE_SHARD_TOKENS",
                               "TIDE_CAPTURE_FLUSH_S", "TIDE_METRICS_REFRESH_S"})
OPERATOR_VOLUMES = frozenset({CONTROL_TOKEN_VOLUME})
# Annotations that switch seccomp or AppArmor off (the Pod Security Standards list them).
SECURITY_ANNOTATION_PREFIXES = (
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
    "container.apparmor.security.beta.kubernetes.io/",
)


@dataclass(frozen=True)
class _Scope:
    """What the override rules need to know about the pool being checked."""

    container: str
    toleration_keys: frozenset[str]
    volume_names: frozenset[str]


_Rule = Callable[[str, Any, _Scope], list[Violation]]


def pod_policy_violations(spec: TideDeploymentSpec, config: OperatorConfig) -> list[Violation]:
    """Every way ``spec`` asks for more than the operator configuration allows (empty: admitted)."""
    violations: list[Violation] = []
    for pool, container in POOLS:
        scheduling: PodScheduling = getattr(spec, pool)
        violations += _scheduling(f"spec.{pool}", scheduling, config)
        scope = _Scope(container, allowed_toleration_keys(config),
                       _volume_names(scheduling.pod_template_override))
        violations += override_violations(f"spec.{pool}.podTemplateOverride", scheduling.pod_template_override, scope)
    if spec.inference.port == config.serving.control_port:
        violations.append(("spec.inference.port", f"{spec.inference.port} is the serving plugin's control port "
                           "(operator configuration serving.controlPort): choose another"))
    return violations


def allowed_image_prefixes(config: OperatorConfig) -> tuple[str, ...]:
    """The configured prefixes, or the repositories of the operator's own serving and trainer images
    (every vendor's)."""
    if config.pod_policy.allowed_image_prefixes is not None:
        return config.pod_policy.allowed_image_prefixes
    images = (config.serving.image, *config.serving.vendor_images.values(),
              config.trainer.image, *config.trainer.vendor_images.values())
    return tuple(dict.fromkeys(image_repository(i) for i in images))


def image_repository(image: str) -> str:
    """``registry/path/name`` without ``:tag`` or ``@digest`` (a registry port's colon is kept)."""
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


def image_allowed(image: str, prefixes: tuple[str, ...]) -> bool:
    # A bare repository must not admit its look-alikes: "org/vllm" never admits "org/vllm-evil".
    return any(image.startswith(p) if p.endswith("/") else image_repository(image) == p for p in prefixes)


def allowed_toleration_keys(config: OperatorConfig) -> frozenset[str]:
    """Configured taint keys plus each GPU class's resource name (the usual taint of a GPU pool)."""
    return frozenset(config.pod_policy.allowed_toleration_keys) | {c.resource_name for c in config.gpu_classes}


def _scheduling(path: str, scheduling: PodScheduling, config: OperatorConfig) -> list[Violation]:
    policy, violations = config.pod_policy, []
    prefixes = allowed_image_prefixes(config)
    if scheduling.image and not image_allowed(scheduling.image, prefixes):
        violations.append((f"{path}.image", f"{scheduling.image!r} is not under an allowed image prefix "
                                            f"({', '.join(prefixes)})"))
    name = scheduling.priority_class_name
    if name and name not in policy.allowed_priority_class_names:
        allowed = ", ".join(policy.allowed_priority_class_names) or "none"
        violations.append((f"{path}.priorityClassName",
                           f"{name!r} is not an allowed priority class (allowed: {allowed})"))
    if scheduling.service_account_name and scheduling.service_account_name == policy.operator_service_account:
        violations.append((f"{path}.serviceAccountName", "is the operator's own ServiceAccount"))
    keys = allowed_toleration_keys(config)
    for index, toleration in enumerate(scheduling.tolerations):
        violations += _toleration_key(f"{path}.tolerations[{index}]", toleration.key, keys)
    return violations


def _toleration_key(path: str, key: Any, allowed: frozenset[str]) -> list[Violation]:
    if key in allowed:
        return []
    what = "a toleration without a key tolerates every taint" if key is None else f"taint key {key!r} is not allowed"
    return [(f"{path}.key", f"{what} (allowed keys: {', '.join(sorted(allowed))})")]


def _volume_names(override: Any) -> frozenset[str]:
    volumes = ((override or {}).get("spec") or {}).get("volumes") if isinstance(override, dict) else None
    named = {v["name"] for v in volumes or () if isinstance(v, dict) and isinstance(v.get("name"), str)}
    return frozenset(named | {pod.SHM_VOLUME, WORK_VOLUME, pod.SCRATCH_VOLUME})


def override_violations(path: str, override: Any, scope: _Scope) -> list[Violation]:
    """The podTemplateOverride walked against the allowlist table below."""
    return [] if override is None else _object(_TEMPLATE)(path, override, scope)


def _object(rules: Mapping[str, _Rule]) -> _Rule:
    """A map whose keys must be in ``rules``; each present value is checked by its rule."""
    def check(path: str, value: Any, scope: _Scope) -> list[Violation]:
        if not isinstance(value, dict):
            return [(path, "must be an object")]
        violations: list[Violation] = []
        for key, item in value.items():
            if key not in rules:
                violations.append((f"{path}.{key}", f"is not allowed in podTemplateOverride "
                                                    f"(allowed here: {', '.join(rules)})"))
            elif item is None:  # null deletes what the operator built (the GPU affinity, the mounts...)
                violations.append((f"{path}.{key}", "may not be null here"))
            else:
                violations += rules[key](f"{path}.{key}", item, scope)
        return violations
    return check


def _list_of(item_rule: _Rule) -> _Rule:
    def check(path: str, value: Any, scope: _Scope) -> list[Violation]:
        if not isinstance(value, list):
            return [(path, "must be a list")]
        return [v for index, item in enumerate(value) for v in item_rule(f"{path}[{index}]", item, scope)]
    return check


def _anything(path: str, value: Any, scope: _Scope) -> list[Violation]:
    return []


def _boolean(path: str, value: Any, scope: _Scope) -> list[Violation]:
    return [] if isinstance(value, bool) else [(path, "must be a boolean")]


def _string_map(refused_prefixes: tuple[str, ...], why: str, nullable: bool) -> _Rule:
    """labels, annotations, nodeSelector: string values (null deletes where ``nullable``)."""
    def check(path: str, value: Any, scope: _Scope) -> list[Violation]:
        if not isinstance(value, dict):
            return [(path, "must be an object")]
        violations = [(f"{path}[{key!r}]", why) for key in value if str(key).startswith(refused_prefixes)]
        violations += [(f"{path}[{key!r}]", "must be a string") for key, item in value.items()
                       if not isinstance(item, str) and not (nullable and item is None)]
        return violations
    return check


def _toleration(path: str, value: Any, scope: _Scope) -> list[Violation]:
    fields = _object(dict.fromkeys(("key", "operator", "value", "effect", "tolerationSeconds"), _anything))
    violations = fields(path, value, scope)
    return violations or _toleration_key(path, value.get("key"), scope.toleration_keys)


def _affinity_narrowing(path: str, value: Any, scope: _Scope) -> list[Violation]:
    # nodeAffinity is refused: its nodeSelectorTerms list would replace the GPU class's, not narrow it
    # (nodeSelector narrows: it is ANDed with the class's required affinity).
    return _object({"podAffinity": _anything, "podAntiAffinity": _anything})(path, value, scope)


def _volume(path: str, value: Any, scope: _Scope) -> list[Violation]:
    violations = _object({"name": _anything, **dict.fromkeys(VOLUME_SOURCES, _anything)})(path, value, scope)
    if isinstance(value, dict) and not isinstance(value.get("name"), str):
        violations.append((f"{path}.name", "is required"))
    if isinstance(value, dict) and value.get("name") in OPERATOR_VOLUMES:
        violations.append((f"{path}.name", f"{value['name']!r} is the operator's volume (the control token)"))
    return violations


def _volume_mount(path: str, value: Any, scope: _Scope) -> list[Violation]:
    rules = dict.fromkeys(("name", "mountPath", "readOnly", "subPath"), _anything)
    violations = _object(rules)(path, value, scope)
    if isinstance(value, dict) and value.get("name") not in scope.volume_names:
        violations.append((f"{path}.name", f"{value.get('name')!r} is not a volume of this pod"))
    return violations


def _quantities(path: str, value: Any, scope: _Scope) -> list[Violation]:
    # Extended resources (a "/" in the name: GPUs, RDMA devices) come from the pool, never the override.
    if not isinstance(value, dict):
        return [(path, "must be an object")]
    return [(f"{path}[{name!r}]", "extended resources (GPUs, devices) come from the GPU pool")
            for name in value if "/" in str(name)]


def _env_var(path: str, value: Any, scope: _Scope) -> list[Violation]:
    violations = _object({"name": _anything, "value": _anything, "valueFrom": _anything})(path, value, scope)
    name = value.get("name") if isinstance(value, dict) else None
    if isinstance(name, str) and operator_env(name):
        violations.append((f"{path}.name", f"{name} is set by the operator (serving and trainer contracts)"))
    return violations


def operator_env(name: str) -> bool:
    return name not in TUNABLE_ENV_NAMES and (name in OPERATOR_ENV_NAMES or name.startswith(OPERATOR_ENV_PREFIXES))


def _container(path: str, value: Any, scope: _Scope) -> list[Violation]:
    if not isinstance(value, dict) or value.get("name") != scope.container:
        return [(path, f"only the {scope.container!r} container may be overridden (no extra containers)")]
    return _object(_CONTAINER)(path, value, scope)


_CONTAINER: dict[str, _Rule] = {
    "name": _anything,
    "env": _list_of(_env_var),
    "resources": _object({"requests": _quantities, "limits": _quantities}),
    "volumeMounts": _list_of(_volume_mount),
}
_POD_SPEC: dict[str, _Rule] = {
    "containers": _list_of(_container),
    "volumes": _list_of(_volume),
    "tolerations": _list_of(_toleration),
    "affinity": _affinity_narrowing,
    "nodeSelector": _string_map((), "", nullable=False),
    "automountServiceAccountToken": _boolean,
}
_METADATA: dict[str, _Rule] = {
    "labels": _string_map(RESERVED_LABEL_PREFIXES, "is a label the operator selects its pods by", nullable=True),
    "annotations": _string_map(SECURITY_ANNOTATION_PREFIXES, "would loosen seccomp or AppArmor", nullable=True),
}
_TEMPLATE: dict[str, _Rule] = {"metadata": _object(_METADATA), "spec": _object(_POD_SPEC)}
