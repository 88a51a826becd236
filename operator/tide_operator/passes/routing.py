"""Capacity-weighted routing in the control pass (inference.gateway): per-class Services, one HTTPRoute.

Weights follow what each class's pods in service serve now (ready serving replicas, lent replicas in
service, each at its catalog throughput and the modelled speedup), so they move as lending starts and
drains. Without the Gateway API's CRDs the spec's gateway cannot be honoured: routing stays even (the
one Service) and the fleet split decides with even routing.
"""

from __future__ import annotations

from typing import Any

from tide_operator.adapters.cluster import Cluster
from tide_operator.api import TideDeploymentSpec
from tide_operator.catalog import GpuCatalog, GpuClass
from tide_operator.control.fleet import ClassGroup, Routing, capacity_weights
from tide_operator.control.placement import Placement
from tide_operator.manifests.routing import build_class_service, build_http_route
from tide_operator.passes.lending import modelled_speedup
from tide_operator.passes.serving_status import StatusDraft


def routing_of(spec: TideDeploymentSpec, cluster: Cluster) -> tuple[Routing, str | None]:
    """Weighted with the HTTPRoute's apiVersion where the spec names a Gateway and the cluster serves
    HTTPRoutes; even (the one Service) otherwise."""
    if spec.inference.gateway is None:
        return Routing.EVEN, None
    api_version = cluster.http_route_api_version()
    return (Routing.WEIGHTED, api_version) if api_version else (Routing.EVEN, None)


def serving_groups(spec: TideDeploymentSpec, placement: Placement, draft: StatusDraft,
                   catalog: GpuCatalog) -> tuple[ClassGroup, ...]:
    """The classes that serve, with the replicas in service as the last passes saw them: the serving
    pool's ready replicas and, with lending on, the lent class (0 while nothing is lent)."""
    speedup, per_replica = modelled_speedup(draft), spec.inference.gpus_per_replica
    groups = []
    inference, pool = placement.inference.gpu_class, draft.status.inference_pool
    if inference is not None:
        ready = pool.replicas_ready if pool else 0
        groups.append(ClassGroup(inference.name, ready, per_replica, inference.inference_throughput, speedup))
    lending = draft.status.lending
    lent_class = _class(catalog, lending.gpu_class if lending and lending.gpu_class else None)
    if spec.training.lend_when_idle and lent_class is not None and lending is not None:
        groups.append(ClassGroup(lent_class.name, lending.replicas_in_service, per_replica,
                                 lent_class.inference_throughput, speedup))
    return tuple(groups)


def apply_routes(name: str, namespace: str, spec: TideDeploymentSpec, groups: tuple[ClassGroup, ...],
                 cluster: Cluster, adopt: Any, api_version: str) -> dict[str, int]:
    """The per-class Services and the HTTPRoute over them; the weights applied."""
    weights = capacity_weights(groups)
    for gpu_class in sorted(weights):
        cluster.apply(adopt(build_class_service(name, namespace, spec, gpu_class)))
    cluster.apply(adopt(build_http_route(name, namespace, spec, weights, api_version)))
    return weights


def _class(catalog: GpuCatalog, name: str | None) -> GpuClass | None:
    return next((c for c in catalog.gpu_classes if c.name == name), None) if name else None
