"""Capacity-weighted routing in the control pass (inference.gateway): per-class Services, one HTTPRoute.

Weights follow what each class's pods in service serve now (ready serving replicas, lent replicas in
service, each at its catalog throughput and the modelled speedup), so they move as lending starts and
drains. Without the Gateway API's CRDs the spec's gateway cannot be honoured: routing stays even (the
one Service) and the fleet split decides with even routing.

What a pass applied is kept in status.routing, so what is no longer wanted goes: the HTTPRoute and every
class Service once the gateway leaves the spec (or the cluster stops serving HTTPRoutes), a class's
Service once the class leaves the route (lending switched off). Only children with our owner UID are
deleted; one that failed to go stays listed, at weight 0, and the next pass tries again.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from tide_operator.adapters.cluster import Cluster
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.status import RouteBackend, RoutingStatus
from tide_operator.catalog import GpuCatalog, GpuClass
from tide_operator.control.fleet import ClassGroup, Routing, capacity_weights
from tide_operator.control.placement import Placement
from tide_operator.manifests import names
from tide_operator.manifests.ownership import ChildConflict
from tide_operator.manifests.routing import HTTP_ROUTE, build_class_service, build_http_route
from tide_operator.passes.lending import modelled_speedup
from tide_operator.passes.serving_status import EventNote, StatusDraft


def routing_of(spec: TideDeploymentSpec, cluster: Cluster) -> tuple[Routing, str | None]:
    """Weighted with the HTTPRoute's apiVersion where the spec names a Gateway and the cluster serves
    HTTPRoutes; even (the one Service) otherwise."""
    if spec.inference.gateway is None:
        return Routing.EVEN, None
    api_version = cluster.http_route_api_version()
    return (Routing.WEIGHTED, api_version) if api_version else (Routing.EVEN, None)


def route(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement, draft: StatusDraft,
          cluster: Cluster, catalog: GpuCatalog, adopt: Any, owner_uid: str, api_version: str | None) -> None:
    """This pass's routing: the weighted HTTPRoute where it is honoured (``api_version``), and what an
    earlier pass applied removed where it is no longer wanted; status.routing says what stands."""
    before = draft.status.routing
    if api_version is None and before is None:
        return  # nothing routed, nothing to remove: no call
    weights = apply_routes(name, namespace, spec, serving_groups(spec, placement, draft, catalog), cluster, adopt,
                           api_version) if api_version is not None else {}
    left = _remove(namespace, _unwanted(before, weights), cluster, owner_uid, draft)
    backends = [RouteBackend(gpu_class=c, service=names.class_service_name(name, c), weight=w)
                for c, w in sorted(weights.items())]
    backends += [RouteBackend(gpu_class=b.gpu_class, service=b.service, weight=0)
                 for b in (before.backends if before else ()) if ("Service", b.service) in left]
    routing = RoutingStatus(route=names.serving_name(name), backends=tuple(backends)) if weights or left else None
    draft.update(routing=routing)
    if before is not None and not weights and not left:
        draft.events.append(EventNote("Normal", "RoutingRemoved", f"HTTPRoute {before.route} and the per-class "
                                      "Services deleted: inference.gateway is not set, or HTTPRoutes are not served"))


def _unwanted(before: RoutingStatus | None, weights: dict[str, int]) -> list[tuple[str, str]]:
    """(kind, name) an earlier pass applied that this one does not: the HTTPRoute first (the Gateway stops
    sending to the Services before they go), then each class Service out of the route."""
    if before is None:
        return []
    services = [("Service", b.service) for b in before.backends if b.gpu_class not in weights]
    return services if weights else [(HTTP_ROUTE, before.route), *services]


def _remove(namespace: str, unwanted: list[tuple[str, str]], cluster: Cluster, owner_uid: str,
            draft: StatusDraft) -> set[tuple[str, str]]:
    """Delete ``unwanted`` in order, ours only; what is left (an API error stops the rest: a Service never
    goes while the route that sends to it stays)."""
    for i, (kind, child) in enumerate(unwanted):
        try:
            cluster.delete_owned(kind, namespace, child, owner_uid)
        except ChildConflict:
            continue  # not ours (made by someone else since): never deleted, no longer tracked
        except ApiException as e:
            draft.events.append(EventNote("Warning", "RoutingCleanupFailed",
                                          f"{kind} {child} not deleted, again next pass: {e.status} {e.reason}"))
            return set(unwanted[i:])
    return set()


def serving_groups(spec: TideDeploymentSpec, placement: Placement, draft: StatusDraft,
                   catalog: GpuCatalog) -> tuple[ClassGroup, ...]:
    """The classes that serve, with the replicas in service as the last passes saw them: the serving
    pool's (or each serving group's) ready replicas and, with lending on, the lent class (0 while
    nothing is lent)."""
    speedup, per_replica = modelled_speedup(draft), spec.inference.gpus_per_replica
    groups = [ClassGroup(c.name, g.replicas_ready, _group_gpus(spec, g.gpu_class), c.inference_throughput, speedup)
              for g in draft.status.serving_groups or () if (c := _class(catalog, g.gpu_class)) is not None]
    inference, pool = placement.inference.gpu_class, draft.status.inference_pool
    if inference is not None and not groups:
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


def _group_gpus(spec: TideDeploymentSpec, gpu_class: str) -> int:
    group = next((g for g in spec.inference.serving_groups if g.gpu_class == gpu_class), None)
    return (group.gpus_per_replica if group else None) or spec.inference.gpus_per_replica


def _class(catalog: GpuCatalog, name: str | None) -> GpuClass | None:
    return next((c for c in catalog.gpu_classes if c.name == name), None) if name else None
