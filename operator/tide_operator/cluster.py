"""The Kubernetes adapter: the only module here that reads or writes cluster objects.

Children are applied create-if-absent, then patched only where the live object differs from
what we build, so an unchanged TideDeployment costs zero writes per pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tide_operator.control.placement import NodeInventory
from tide_operator.manifests.compare import differences

log = logging.getLogger(__name__)
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/")


@dataclass(frozen=True)
class Applied:
    kind: str
    name: str
    action: str  # created | patched | unchanged
    drift: tuple[str, ...] = ()


class Cluster:
    def __init__(self, api: client.ApiClient | None = None) -> None:
        self.api = api or client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)

    # --- reads ---
    def secret_exists(self, namespace: str, name: str) -> bool:
        return self._read("Secret", namespace, name) is not None

    def deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read("Deployment", namespace, name)

    def node_inventory(self, exclude_label: tuple[str, str] | None = None) -> list[NodeInventory]:
        """Nodes with their GPUs and what pods not matching ``exclude_label`` already requested."""
        requested: dict[str, dict[str, int]] = {}
        for pod in self.core.list_pod_for_all_namespaces().items:
            if not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed"):
                continue
            if exclude_label and (pod.metadata.labels or {}).get(exclude_label[0]) == exclude_label[1]:
                continue
            node = requested.setdefault(pod.spec.node_name, {})
            for container in pod.spec.containers:
                for resource, amount in ((container.resources and container.resources.limits) or {}).items():
                    if resource.startswith(GPU_RESOURCE_PREFIXES):
                        node[resource] = node.get(resource, 0) + int(amount)
        return [
            NodeInventory(
                name=n.metadata.name, labels=n.metadata.labels or {},
                allocatable={k: int(v) for k, v in (n.status.allocatable or {}).items()
                             if k.startswith(GPU_RESOURCE_PREFIXES)},
                requested=requested.get(n.metadata.name, {}),
                schedulable=not n.spec.unschedulable and _ready(n),
            )
            for n in self.core.list_node().items
        ]

    # --- writes ---
    def create_if_absent(self, desired: dict[str, Any]) -> Applied:
        kind, meta = desired["kind"], desired["metadata"]
        if self._read(kind, meta["namespace"], meta["name"]) is not None:
            return Applied(kind, meta["name"], "unchanged")
        try:
            self._create(kind, meta["namespace"], desired)
        except ApiException as e:
            if e.status != 409:
                raise
            return Applied(kind, meta["name"], "unchanged")
        return Applied(kind, meta["name"], "created")

    def apply(self, desired: dict[str, Any]) -> Applied:
        kind, meta = desired["kind"], desired["metadata"]
        live = self._read(kind, meta["namespace"], meta["name"])
        if live is None:
            try:
                self._create(kind, meta["namespace"], desired)
                return Applied(kind, meta["name"], "created")
            except ApiException as e:
                if e.status != 409:  # lost a race with another pass: compare with what won
                    raise
                live = self._read(kind, meta["namespace"], meta["name"])
        drift = differences(desired, live)
        if not drift:
            return Applied(kind, meta["name"], "unchanged")
        self._patch(kind, meta["namespace"], meta["name"], desired)
        return Applied(kind, meta["name"], "patched", tuple(drift))

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        items = self.batch.list_namespaced_job(namespace, label_selector=selector).items
        return [self.api.sanitize_for_serialization(j) for j in items]

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        items = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [self.api.sanitize_for_serialization(p) for p in items]

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        import base64

        secret = self.core.read_namespaced_secret(name, namespace)
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}

    # --- per-kind plumbing ---
    def _read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        reader = {"Deployment": self.apps.read_namespaced_deployment, "Service": self.core.read_namespaced_service,
                  "ConfigMap": self.core.read_namespaced_config_map, "Secret": self.core.read_namespaced_secret,
                  "Job": self.batch.read_namespaced_job}[kind]
        try:
            return self.api.sanitize_for_serialization(reader(name, namespace))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _create(self, kind: str, namespace: str, body: dict[str, Any]) -> None:
        creator = {"Deployment": self.apps.create_namespaced_deployment,
                   "Service": self.core.create_namespaced_service,
                   "ConfigMap": self.core.create_namespaced_config_map,
                   "Secret": self.core.create_namespaced_secret,
                   "Job": self.batch.create_namespaced_job}[kind]
        creator(namespace, body)

    def _patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        patcher = {"Deployment": self.apps.patch_namespaced_deployment,
                   "Service": self.core.patch_namespaced_service,
                   "ConfigMap": self.core.patch_namespaced_config_map,
                   "Secret": self.core.patch_namespaced_secret,
                   "Job": self.batch.patch_namespaced_job}[kind]
        patcher(name, namespace, body)  # strategic merge: lists of named items merge by name


def _ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
