"""What a pass reads about pods, nodes and Jobs, kept current by watches instead of listed every pass.

Kopf indexes (handlers register the functions below with ``@kopf.index``) hold, per event, only what
the passes need: our own pods, Jobs and Deployments (labelled tide.dev/deployment; the watches carry
that label selector, so the apiserver sends nothing else) by namespace, and every node's GPU facts. Per node, the
GPUs that scheduled pods of every namespace request come from a watch of their own
(gpu_request_watch.py). A pass then reads memory: no LIST per pass whatever the number of
TideDeployments or pods in the cluster (controller-runtime's informer caches do the same; Kopf also
waits for every index's first listing before any handler runs).

Kopf updates the indexes on its event loop while passes run in worker threads, so a reader copies what
it needs and copies again if an update landed mid-copy (``_copied``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from tide_operator.control.placement import NodeInventory

GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/")
INDEXES = ("tide_pods", "tide_jobs", "tide_deployments", "gpu_nodes")  # the kwargs Kopf passes handlers
T = TypeVar("T")


@dataclass(frozen=True)
class GpuRequest:
    """The GPUs one scheduled, unfinished pod requests on its node."""

    namespace: str
    name: str
    deployment: str | None  # its tide.dev/deployment label (a TideDeployment's own pods are not counted)
    gpus: tuple[tuple[str, int], ...]


# ---- index functions: body -> {key: value}; Kopf keeps one entry per object, gone with the object -----

def tide_object(body: Mapping[str, Any], **_: Any) -> dict[str, dict[str, Any]] | None:
    """Our pods, Jobs and Deployments (the watch selects them by label), whole, by namespace."""
    return {body["metadata"]["namespace"]: _plain(body)}


def gpu_node(body: Mapping[str, Any], **_: Any) -> dict[None, NodeInventory]:
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    allocatable = {k: int(v) for k, v in (status.get("allocatable") or {}).items()
                   if k.startswith(GPU_RESOURCE_PREFIXES)}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    return {None: NodeInventory(name=meta["name"], labels=dict(meta.get("labels") or {}), allocatable=allocatable,
                                requested={}, schedulable=not spec.get("unschedulable") and ready)}


def gpu_request(body: Mapping[str, Any], **_: Any) -> dict[str, GpuRequest] | None:
    """Pods holding GPUs on a node; pending, finished and GPU-less pods are not kept at all (the watch
    of gpu_request_watch.py does not even receive pending and finished ones)."""
    spec, status, meta = body.get("spec") or {}, body.get("status") or {}, body["metadata"]
    node = spec.get("nodeName")
    if not node or status.get("phase") in ("Succeeded", "Failed"):
        return None
    gpus = pod_gpus(spec)
    if not gpus:
        return None
    labels = meta.get("labels") or {}
    return {node: GpuRequest(meta.get("namespace", ""), meta["name"], labels.get("tide.dev/deployment"),
                             tuple(sorted(gpus.items())))}


def pod_gpus(spec: Mapping[str, Any]) -> dict[str, int]:
    """GPU limits summed over the pod's containers (devices are requested as limits)."""
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for resource, amount in ((container.get("resources") or {}).get("limits") or {}).items():
            if resource.startswith(GPU_RESOURCE_PREFIXES):
                total[resource] = total.get(resource, 0) + int(amount)
    return total


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    return dict(body)


# ---- the reader a pass uses ---------------------------------------------------------------------

class HeldGpuSource(Protocol):
    def by_node(self) -> Mapping[str, Iterable[GpuRequest]] | None:
        """GPU requests of scheduled pods by node; None while not known yet (the pass lists instead)."""


@dataclass(frozen=True)
class WatchCache:
    """The indexes as Kopf passes them to a handler (a kopf.Index is a mapping of key -> values)."""

    pods: Mapping[Any, Iterable[Any]]
    jobs: Mapping[Any, Iterable[Any]]
    nodes: Mapping[Any, Iterable[Any]]
    requests: HeldGpuSource | None  # None: not every namespace is watched (list instead)
    deployments: Mapping[Any, Iterable[Any]] = field(default_factory=dict)

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any], requests: HeldGpuSource | None) -> WatchCache | None:
        if not all(name in kwargs for name in INDEXES):
            return None  # not run by Kopf with the indexes (a test, a one-off pass): the cluster is listed
        return cls(kwargs["tide_pods"], kwargs["tide_jobs"], kwargs["gpu_nodes"], requests,
                   kwargs["tide_deployments"])

    def tide_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Our Deployment of that name; None when the cache has none (it may still exist, not ours: read it)."""
        found = _copied(lambda: list(self.deployments.get(namespace, ())))
        return next((d for d in found if d["metadata"]["name"] == name), None)

    def tide_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return _matching(_copied(lambda: list(self.pods.get(namespace, ()))), selector)

    def tide_jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return _matching(_copied(lambda: list(self.jobs.get(namespace, ()))), selector)

    def node_inventory(self, exclude: Callable[[GpuRequest], bool]) -> list[NodeInventory] | None:
        """Nodes with the GPUs that pods not ``exclude``d request on them; None without the pods' watch."""
        held = self.requests.by_node() if self.requests is not None else None
        if held is None:
            return None
        nodes: list[NodeInventory] = _copied(lambda: list(self.nodes.get(None, ())))
        return [replace(node, requested=_summed(r for r in held.get(node.name, ()) if not exclude(r)))
                for node in sorted(nodes, key=lambda n: n.name)]


def _summed(requests: Iterable[GpuRequest]) -> dict[str, int]:
    total: dict[str, int] = {}
    for request in requests:
        for resource, amount in request.gpus:
            total[resource] = total.get(resource, 0) + amount
    return total


def _matching(objects: list[dict[str, Any]], selector: str) -> list[dict[str, Any]]:
    """Equality selectors only (``a=b,c=d``): the only kind the operator writes."""
    wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
    matched = [o for o in objects
               if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
    return sorted(matched, key=lambda o: o["metadata"]["name"])


def _copied(copy: Callable[[], T]) -> T:
    """A copy of index contents taken while Kopf may be updating them (a dict changed mid-iteration
    raises RuntimeError: copy again; updates are single events, so this settles at once)."""
    for _ in range(50):
        try:
            return copy()
        except RuntimeError:
            continue
    return copy()
