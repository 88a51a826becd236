"""Pod pieces shared by the vLLM servers and the trainer Jobs: placement, GPUs, S3 access."""

from __future__ import annotations

import copy
from typing import Any

from tide_contracts.encryption import S3Encryption
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.api.spec_control import CaptureSpec, ServerSideEncryption
from tide_operator.api.spec_workload import PodScheduling, S3Storage
from tide_operator.catalog import GpuClass, LabelRequirement
from tide_operator.control.placement import PoolChoice

SHM_VOLUME = "dshm"
SHM_MOUNT_PATH = "/dev/shm"  # noqa: S108 - a mount path for shared memory, not a temporary file
# Writable /tmp under a read-only root filesystem (torchrun's logs, Python's tempfile).
SCRATCH_VOLUME = "tmp"
SCRATCH_MOUNT_PATH = "/tmp"  # noqa: S108 - a mount path, not a temporary file
# The Kubernetes "restricted" Pod Security profile
# (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted).
RESTRICTED_POD_SECURITY: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
POD_CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")


def _term(expressions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"matchExpressions": expressions}


def _match(requirement: LabelRequirement, operator: str) -> dict[str, Any]:
    return {"key": requirement.key, "operator": operator, "values": list(requirement.values)}


def _exclusive_terms(gpu_class: GpuClass) -> list[dict[str, Any]]:
    """The class's nodes as one term per label requirement, each also refusing the earlier ones
    (NotIn matches an absent label), so a node carrying two of them counts once."""
    reqs = gpu_class.node_labels
    return [_term([_match(req, "In"), *(_match(earlier, "NotIn") for earlier in reqs[:i])])
            for i, req in enumerate(reqs)]


def node_affinity(choice: PoolChoice) -> dict[str, Any]:
    """Required: a node of any eligible class (one nodeSelectorTerm per label requirement, ORed);
    preferred: each class by its weight, so the scheduler decides and an autoscaler sees the pods."""
    affinity = choice.affinity
    required = [_term([_match(req, "In")]) for gpu_class, _ in affinity for req in gpu_class.node_labels]
    preferred = [{"weight": weight, "preference": term}
                 for gpu_class, weight in affinity for term in _exclusive_terms(gpu_class)]
    node: dict[str, Any] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": required}}
    if len(affinity) > 1:  # one class alone: nothing to prefer
        node["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node}


def gpu_resources(scheduling: PodScheduling, gpu_class: GpuClass, gpus: int) -> dict[str, Any]:
    """The spec's CPU/memory overrides plus the GPU limit, which always comes from the pool."""
    overrides = scheduling.resources
    requests = dict(overrides.requests or {}) if overrides else {}
    limits = dict(overrides.limits or {}) if overrides else {}
    limits[gpu_class.resource_name] = gpus
    requests.pop(gpu_class.resource_name, None)  # extended resources: the limit is the request
    return {"requests": requests, "limits": limits} if requests else {"limits": limits}


def registry_prefix(td_name: str, namespace: str, storage: S3Storage) -> str:
    """Key prefix of the deployment's registry (docs/contracts/draft-registry.md).

    ``spec.storage.s3.prefix``, or ``<namespace>/<name>`` so deployments sharing a bucket stay apart.
    The operator's registry adapter must use the same prefix as the pods.
    """
    return (storage.prefix or f"{namespace}/{td_name}").strip("/")


def s3_uri(td_name: str, namespace: str, storage: S3Storage, *parts: str) -> str:
    """``s3://bucket/<registry prefix>/<parts>``."""
    path = "/".join(p.strip("/") for p in (registry_prefix(td_name, namespace, storage), *parts) if p.strip("/"))
    return f"s3://{storage.bucket}/{path}"


def s3_env(storage: S3Storage) -> list[dict[str, Any]]:
    """AWS variables for boto3 and vLLM's Run:ai streamer; keys come from the Secret when one is named."""
    env: list[dict[str, Any]] = []
    if storage.credentials_secret:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": storage.credentials_secret, "key": key}}})
    if storage.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": storage.endpoint})
        # S3-compatible stores (MinIO, moto) want path-style addressing.
        env.append({"name": "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "value": "0"})
    if storage.region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": storage.region})
    return env


def s3_encryption(capture: CaptureSpec) -> S3Encryption:
    """spec.control.capture's server-side encryption, as every writer applies it."""
    algorithm = capture.server_side_encryption
    return S3Encryption(None if algorithm is ServerSideEncryption.NONE else algorithm.value, capture.kms_key_id)


def storage_env(spec: TideDeploymentSpec) -> list[dict[str, Any]]:
    """S3 access plus the encryption every write of the pod carries (TIDE_S3_SSE*: captures, candidates)."""
    encryption = s3_encryption(spec.control.capture).env()
    return s3_env(spec.storage.s3) + [{"name": key, "value": value} for key, value in encryption.items()]


def field_env(name: str, field_path: str) -> dict[str, Any]:
    """An environment variable from the downward API (``status.podIP``, ``metadata.name``)."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def shm_volume(size: str) -> dict[str, Any]:
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def scratch_volume() -> dict[str, Any]:
    return {"name": SCRATCH_VOLUME, "emptyDir": {}}


def container_security(read_only_root_filesystem: bool) -> dict[str, Any]:
    """A container's part of the restricted profile, plus the (separate) read-only root setting."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
            "readOnlyRootFilesystem": read_only_root_filesystem}


def restricted(template: dict[str, Any], read_only_root_filesystem: bool) -> dict[str, Any]:
    """``template`` (modified) with the restricted security contexts on the pod and every container.

    Applied after podTemplateOverride is merged, so an override can never loosen them (the pod
    policy refuses such overrides too; this holds even where the check is bypassed).
    """
    spec = template["spec"]
    spec["securityContext"] = copy.deepcopy(RESTRICTED_POD_SECURITY)
    for kind in POD_CONTAINER_KINDS:
        for container in spec.get(kind) or ():
            container["securityContext"] = container_security(read_only_root_filesystem)
    return template


def scheduling_fields(scheduling: PodScheduling, choice: PoolChoice) -> dict[str, Any]:
    """Affinity, tolerations, priority class and service account of a pod spec.

    The service account token is not mounted: neither vLLM nor the trainer calls the Kubernetes API
    (podTemplateOverride may set ``automountServiceAccountToken: true`` for pods that must).
    """
    fields: dict[str, Any] = {"affinity": node_affinity(choice), "automountServiceAccountToken": False}
    if scheduling.tolerations:
        fields["tolerations"] = [toleration.to_wire() for toleration in scheduling.tolerations]
    if scheduling.priority_class_name:
        fields["priorityClassName"] = scheduling.priority_class_name
    if scheduling.service_account_name:
        fields["serviceAccountName"] = scheduling.service_account_name
    return fields
