"""The Kubernetes adapter: the only module here that reads or writes cluster objects.

Every write to a child goes through an ownership check first (manifests/ownership.py): an object
named like a child without the TideDeployment's UID raises ChildConflict and is left untouched.
Children are created with a plain create (a race with someone else's object is a 409, never a
takeover), then Server-Side Applied under our field manager only when they differ from what we
build (manifests/field_manager.py), so an unchanged TideDeployment costs zero writes per pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tide_operator.adapters.secret_cache import SecretCache
from tide_operator.adapters.watch_cache import GPU_RESOURCE_PREFIXES, GpuRequest, WatchCache, pod_gpus
from tide_operator.config import KubernetesConfig
from tide_operator.control.placement import NodeInventory
from tide_operator.manifests.field_manager import (
    FIELD_MANAGER,
    apply_needed,
    migrated_managed_fields,
    with_applied_hash,
)
from tide_operator.manifests.ownership import ChildConflict, conflict, owner_uids
from tide_operator.manifests.routing import GATEWAY_GROUP, HTTP_ROUTE, ROUTE_VERSIONS
from tide_operator.process_identity import USER_AGENT

log = logging.getLogger(__name__)
DISRUPTION_BUDGET = "PodDisruptionBudget"
# Group versions serving PodDisruptionBudget, newest first: policy/v1 since Kubernetes 1.21, only
# policy/v1beta1 on 1.20 (removed in 1.25). The python client types only v1, so both go by path.
POLICY_VERSIONS = ("policy/v1", "policy/v1beta1")
ROUTE_DISCOVERY_S = 60.0
_ROUTE_APIS: dict[str, tuple[float, str | None]] = {}  # API server -> (when asked, the HTTPRoute version)
# API server URL -> the policy version it serves: discovered once per operator process.
_POLICY_VERSION: dict[str, str] = {}
RequestTimeout = tuple[float, float]  # (connect, read) seconds
# Set once from the operator configuration when the handlers load it (set_request_timeout).
_DEFAULTS: dict[str, RequestTimeout] = {}


def set_request_timeout(config: KubernetesConfig) -> None:
    _DEFAULTS["request_timeout"] = (config.connect_timeout_seconds, config.read_timeout_seconds)


set_request_timeout(KubernetesConfig())


class TimedApiClient(client.ApiClient):  # type: ignore[misc]
    """An ApiClient whose every request has a (connect, read) timeout unless the call sets its own.

    The generated client has no default (Configuration holds none): without one a request to an API
    server that stops answering blocks its thread for ever. A watch (query watch=true) streams for as
    long as the server keeps it open, so it keeps no timeout; the operator's watches are Kopf's anyway.
    """

    def __init__(self, request_timeout: RequestTimeout, configuration: client.Configuration | None = None) -> None:
        super().__init__(configuration)
        self.request_timeout = request_timeout
        self.user_agent = USER_AGENT  # the audit log tells the replicas apart (process_identity.py)

    def request(self, method: str, url: str, query_params: Any = None, headers: Any = None, post_params: Any = None,
                body: Any = None, _preload_content: bool = True, _request_timeout: Any = None) -> Any:
        if _request_timeout is None and not any(k == "watch" and v for k, v in query_params or ()):
            _request_timeout = self.request_timeout
        return super().request(method, url, query_params=query_params, headers=headers, post_params=post_params,
                                body=body, _preload_content=_preload_content, _request_timeout=_request_timeout)


@dataclass(frozen=True)
class Applied:
    kind: str
    name: str
    action: str  # created | patched | migrated | unchanged | deleted
    drift: tuple[str, ...] = ()


def api_client() -> TimedApiClient:
    """A client whose requests time out as the operator configuration says."""
    return TimedApiClient(_DEFAULTS["request_timeout"])


class Cluster:
    """``cache``: the operator's watch caches (watch_cache.py); without them (tests, one-off passes) the
    pods, Jobs and nodes are listed. ``secrets``: the process's referenced Secrets (secret_cache.py);
    without it each Cluster reads them once."""

    def __init__(self, api: client.ApiClient | None = None, cache: WatchCache | None = None,
                 request_timeout: RequestTimeout | None = None, secrets: SecretCache | None = None) -> None:
        self.api = api or TimedApiClient(request_timeout or _DEFAULTS["request_timeout"])
        self.cache = cache
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        # Without the process's cache, this Cluster's own: each referenced Secret read once per pass.
        self.secrets = secrets if secrets is not None else SecretCache(max_age_s=float("inf"))
        self._missing: set[tuple[str, str]] = set()  # referenced Secrets this pass found missing (read once)

    # --- reads ---
    def secret_exists(self, namespace: str, name: str) -> bool:
        return self._referenced_secret(namespace, name) is not None

    def deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read("Deployment", namespace, name)

    def node_inventory(self, exclude: tuple[str, str] | None = None) -> list[NodeInventory]:
        """Nodes with their GPUs and what pods already requested, leaving out the pods of the TideDeployment
        ``exclude`` = (namespace, name)."""
        def excluded(request: GpuRequest) -> bool:
            return exclude is not None and (request.namespace, request.deployment) == exclude

        if self.cache is not None and (cached := self.cache.node_inventory(excluded)) is not None:
            return cached
        requested: dict[str, dict[str, int]] = {}
        for pod in self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items:
            body = self.api.sanitize_for_serialization(pod)
            meta = body["metadata"]
            request = GpuRequest(meta.get("namespace", ""), meta["name"], (meta.get("labels") or {}).get(
                "tide.dev/deployment"), tuple(sorted(pod_gpus(body.get("spec") or {}).items())))
            if pod.status.phase in ("Succeeded", "Failed") or excluded(request):
                continue
            node = requested.setdefault(pod.spec.node_name, {})
            for resource, amount in request.gpus:
                node[resource] = node.get(resource, 0) + amount
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

    def disruption_budget_api_version(self) -> str:
        """The policy group version this API server serves PodDisruptionBudgets in (cached)."""
        host = self.api.configuration.host
        if host not in _POLICY_VERSION:
            served = {v.group_version for v in client.PolicyApi(self.api).get_api_group().versions or ()}
            version = next((v for v in POLICY_VERSIONS if v in served), None)
            if version is None:
                raise ApiException(status=404, reason=f"no PodDisruptionBudget version (policy: {sorted(served)})")
            _POLICY_VERSION[host] = version
        return _POLICY_VERSION[host]

    def _budgets(self, namespace: str, name: str = "") -> str:
        path = f"/apis/{self.disruption_budget_api_version()}/namespaces/{namespace}/poddisruptionbudgets"
        return f"{path}/{name}" if name else path

    def _policy_call(self, method: str, path: str, body: Any = None, query: list[tuple[str, Any]] | None = None,
                     content_type: str = "application/json") -> dict[str, Any]:
        try:
            return self.api.call_api(  # type: ignore[no-any-return]
                path, method, query_params=query or [], body=body, auth_settings=["BearerToken"],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                response_types_map={200: "object", 201: "object"}, _return_http_data_only=True)
        except ApiException as e:
            if e.status == 404 and method != "GET":  # the version went away (an upgrade): discover again
                _POLICY_VERSION.pop(self.api.configuration.host, None)
            raise

    def delete_owned(self, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        """Delete child ``name`` (a PodDisruptionBudget, a class Service, the HTTPRoute, a retiring serving
        Deployment) if it exists and is ours; True when it was."""
        live = self._read(kind, namespace, name)
        if live is None:
            return False
        found = conflict(owner_uid, kind, live)
        if found is not None:
            raise ChildConflict([found])
        deleter = {"Service": self.core.delete_namespaced_service,
                   "Deployment": self.apps.delete_namespaced_deployment,
                   HTTP_ROUTE: lambda n, ns: self._routes().delete_namespaced_custom_object(*self._route_path(ns), n),
                   DISRUPTION_BUDGET: lambda n, ns: self._policy_call("DELETE", self._budgets(ns, n))}[kind]
        try:
            deleter(name, namespace)
        except ApiException as e:
            if e.status != 404:
                raise
        return True

    def scale_owned(self, namespace: str, name: str, replicas: int, owner_uid: str) -> None:
        """Set our Deployment ``name``'s replicas alone (a retiring serving Deployment keeps its template)."""
        live = self._read("Deployment", namespace, name)
        if live is None or (live.get("spec") or {}).get("replicas") == replicas:
            return
        found = conflict(owner_uid, "Deployment", live)
        if found is not None:
            raise ChildConflict([found])
        self.apps.patch_namespaced_deployment(name, namespace, {"spec": {"replicas": replicas}},
                                              field_manager=FIELD_MANAGER)

    # --- writes ---
    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(kind, namespace, name)

    def create_owned(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> Applied:
        """Create once and never change (a Secret's token, a trainer Job): use it only if it is ours."""
        kind, meta = desired["kind"], desired["metadata"]
        live = live if live is not None else self._read(kind, meta["namespace"], meta["name"])
        if live is None:
            live = self._create_or_read(desired)
            if live is None:
                return Applied(kind, meta["name"], "created")
        _check_owner(desired, live)
        return Applied(kind, meta["name"], "unchanged")

    def apply(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> Applied:
        """Create, or Server-Side Apply where the live child differs; ``live`` saves a read."""
        kind, meta = desired["kind"], desired["metadata"]
        body = with_applied_hash(desired)
        live = live if live is not None else self._read(kind, meta["namespace"], meta["name"])
        if live is None:
            live = self._create_or_read(body)
            if live is None:
                return Applied(kind, meta["name"], "created")
        _check_owner(desired, live)
        action = "unchanged"
        migrated = migrated_managed_fields(live)
        if migrated is not None:  # once per child made before SSA: the fields become ours to remove
            live = self._migrate(kind, live, migrated)
            action = "migrated"
        drift = apply_needed(body, live)
        if not drift:
            return Applied(kind, meta["name"], action)
        self._patch(kind, meta["namespace"], meta["name"], body, field_manager=FIELD_MANAGER, force=True,
                    _content_type="application/apply-patch+yaml")
        return Applied(kind, meta["name"], "patched", tuple(drift))

    def _create_or_read(self, desired: dict[str, Any]) -> dict[str, Any] | None:
        """None when we created it; the object that won the race otherwise (checked by the caller)."""
        kind, meta = desired["kind"], desired["metadata"]
        try:
            self._create(kind, meta["namespace"], desired)
            return None
        except ApiException as e:
            if e.status != 409:
                raise
        live = self._read(kind, meta["namespace"], meta["name"])
        if live is None:  # created and deleted between the two calls: the next pass creates it
            raise ApiException(status=409, reason=f"{kind} {meta['name']} changed during the pass")
        return live

    def _migrate(self, kind: str, live: dict[str, Any], managed_fields: list[dict[str, Any]]) -> dict[str, Any]:
        meta = live["metadata"]
        patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                 {"op": "replace", "path": "/metadata/managedFields", "value": managed_fields}]
        return self._patch(kind, meta["namespace"], meta["name"], patch, _content_type="application/json-patch+json")

    def delete_owned_job(self, namespace: str, name: str, owner_uid: str) -> None:
        """Delete trainer Job ``name`` if it exists and is ours (ChildConflict if it is not)."""
        live = self._read("Job", namespace, name)
        if live is None:
            return
        found = conflict(owner_uid, "Job", live)
        if found is not None:
            raise ChildConflict([found])
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as e:
            if e.status != 404:
                raise

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Our Jobs (``selector`` names tide.dev labels)."""
        if self.cache is not None:
            return self.cache.tide_jobs(namespace, selector)
        items = self.batch.list_namespaced_job(namespace, label_selector=selector).items
        return [self.api.sanitize_for_serialization(j) for j in items]

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Our pods (``selector`` names tide.dev labels)."""
        if self.cache is not None:
            return self.cache.tide_pods(namespace, selector)
        items = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [self.api.sanitize_for_serialization(p) for p in items]

    def http_route_api_version(self) -> str | None:
        """``gateway.networking.k8s.io/<version>`` where the Gateway API's HTTPRoute is served, else None.
        Discovery, asked again after ROUTE_DISCOVERY_S: CRDs installed later are found."""
        key = self.api.configuration.host
        known = _ROUTE_APIS.get(key)
        if known is not None and time.monotonic() - known[0] < ROUTE_DISCOVERY_S:
            return known[1]
        found = None
        try:
            groups = client.ApisApi(self.api).get_api_versions().groups or []
        except ApiException:
            groups = []
        served = {v.version for g in groups if g.name == GATEWAY_GROUP for v in g.versions or []}
        version = next((v for v in ROUTE_VERSIONS if v in served), None)
        if version is not None:
            found = f"{GATEWAY_GROUP}/{version}"
        _ROUTE_APIS[key] = (time.monotonic(), found)
        return found

    def set_pod_condition(self, namespace: str, pod: str, condition: dict[str, Any]) -> None:
        """One condition on a pod's status (a readiness gate), merged by type: the kubelet's stay."""
        self.core.patch_namespaced_pod_status(pod, namespace, {"status": {"conditions": [condition]}},
                                              _content_type="application/strategic-merge-patch+json")

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        import base64

        data = self._referenced_secret(namespace, name)
        if data is None:
            raise ApiException(status=404, reason=f"Secret {namespace}/{name} not found")
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def _referenced_secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The data of a Secret a spec references (S3 or Prometheus credentials): one GET, then kept
        until refused or aged out (secret_cache.py), so the existence check and the credentials share
        a read. Never the control token's Secret (read() reads it each pass: we write it)."""
        def read() -> Mapping[str, str] | None:
            try:
                secret = self.api.sanitize_for_serialization(self.core.read_namespaced_secret(name, namespace))
            except ApiException as e:
                if e.status != 404:
                    raise
                return None
            return secret.get("data") or {}  # type: ignore[no-any-return]

        if (namespace, name) in self._missing:
            return None
        data = self.secrets.get(namespace, name, read)
        if data is None:
            self._missing.add((namespace, name))
        return data

    # --- per-kind plumbing ---
    def _read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Deployment" and self.cache is not None and (
                cached := self.cache.tide_deployment(namespace, name)) is not None:
            return cached  # ours, from the watch; a miss is read (a same-named object may not be ours)
        reader = {"Deployment": self.apps.read_namespaced_deployment, "Service": self.core.read_namespaced_service,
                  HTTP_ROUTE: lambda n, ns: self._routes().get_namespaced_custom_object(*self._route_path(ns), n),
                  "ConfigMap": self.core.read_namespaced_config_map, "Secret": self.core.read_namespaced_secret,
                  "Job": self.batch.read_namespaced_job,
                  DISRUPTION_BUDGET: lambda n, ns: self._policy_call("GET", self._budgets(ns, n))}[kind]
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
                   "Job": self.batch.create_namespaced_job,
                   HTTP_ROUTE: lambda ns, b, field_manager: self._routes().create_namespaced_custom_object(
                       *self._route_path(ns), b, field_manager=field_manager),
                   DISRUPTION_BUDGET: lambda ns, b, field_manager: self._policy_call(
                       "POST", self._budgets(ns), b, [("fieldManager", field_manager)])}[kind]
        creator(namespace, body, field_manager=FIELD_MANAGER)

    def _patch(self, kind: str, namespace: str, name: str, body: Any, **how: Any) -> dict[str, Any]:
        patcher = {"Deployment": self.apps.patch_namespaced_deployment,
                   "Service": self.core.patch_namespaced_service,
                   "ConfigMap": self.core.patch_namespaced_config_map,
                   "Secret": self.core.patch_namespaced_secret,
                   "Job": self.batch.patch_namespaced_job,
                   HTTP_ROUTE: lambda n, ns, b, **how: self._routes().patch_namespaced_custom_object(
                       *self._route_path(ns), n, b, **how),
                   DISRUPTION_BUDGET: self._patch_budget}[kind]
        return self.api.sanitize_for_serialization(patcher(name, namespace, body, **how))

    def _routes(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def _route_path(self, namespace: str) -> tuple[str, str, str, str]:
        api_version = self.http_route_api_version()
        if api_version is None:
            raise ApiException(status=404, reason="the Gateway API's HTTPRoute is not served by this cluster")
        group, version = api_version.split("/")
        return group, version, namespace, "httproutes"

    def _patch_budget(self, name: str, namespace: str, body: Any, *, _content_type: str,
                      field_manager: str | None = None, force: bool | None = None) -> dict[str, Any]:
        query = [(key, value) for key, value in (("fieldManager", field_manager), ("force", force)) if value]
        return self._policy_call("PATCH", self._budgets(namespace, name), body, query, _content_type)


def _check_owner(desired: dict[str, Any], live: dict[str, Any]) -> None:
    """The owner is the one ``adopt`` put on ``desired``; a live object without it is refused."""
    uids = owner_uids(desired)
    found = conflict(next(iter(uids)) if len(uids) == 1 else "", desired["kind"], live)
    if found is not None:
        raise ChildConflict([found])


def _ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
