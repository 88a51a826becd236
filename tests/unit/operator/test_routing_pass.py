"""Which routing the control pass uses (issue 17 item 2), and the groups it weights."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from tide_operator.api.status import (
    InferencePoolStatus,
    LendingStatus,
    RouteBackend,
    RoutingStatus,
    SpeculationStatus,
    TideDeploymentStatus,
)
from tide_operator.catalog import DEFAULT_CATALOG
from tide_operator.control.fleet import Routing
from tide_operator.manifests.ownership import ChildConflict, Conflict
from tide_operator.passes.routing import apply_routes, route, routing_of, serving_groups
from tide_operator.passes.serving_status import StatusDraft

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "manifests"))
from manifest_fixtures import placement, spec_with

GATEWAY = {"gateway": {"name": "gw"}}


class RouteCluster:
    def __init__(self, served: str | None) -> None:
        self.served, self.asked, self.applied = served, 0, []

    def http_route_api_version(self) -> str | None:
        self.asked += 1
        return self.served

    def apply(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> None:
        self.applied.append(desired)


def test_even_without_a_gateway_and_not_asked() -> None:
    cluster = RouteCluster("gateway.networking.k8s.io/v1")
    assert routing_of(spec_with(), cluster) == (Routing.EVEN, None)  # type: ignore[arg-type]
    assert cluster.asked == 0


def test_a_gateway_needs_the_cluster_to_serve_httproutes() -> None:
    assert routing_of(spec_with(inference=GATEWAY), RouteCluster(None)) == (Routing.EVEN, None)  # type: ignore[arg-type]
    served = RouteCluster("gateway.networking.k8s.io/v1beta1")
    assert routing_of(spec_with(inference=GATEWAY), served) == (  # type: ignore[arg-type]
        Routing.WEIGHTED, "gateway.networking.k8s.io/v1beta1")


def test_the_groups_are_the_pods_in_service_and_the_route_weights_them() -> None:
    spec = spec_with(inference=GATEWAY, training={"lendWhenIdle": True})  # 4 GPUs per replica
    status = TideDeploymentStatus(
        inference_pool=InferencePoolStatus(gpu_class="H100", replicas=2, replicas_ready=2),
        lending=LendingStatus(gpu_class="MI250", state="Lent", replicas=4, replicas_in_service=3),
        speculation=SpeculationStatus(enabled=True, modelled_speedup_percent=120))
    draft = StatusDraft(status, 1, datetime(2026, 12, 7, tzinfo=UTC))
    groups = serving_groups(spec, placement("H100", "MI250"), draft, DEFAULT_CATALOG)
    assert [(g.name, g.replicas, g.speedup) for g in groups] == [("H100", 2, 1.2), ("MI250", 3, 1.2)]
    cluster = RouteCluster("gateway.networking.k8s.io/v1")
    weights = apply_routes("chat", "llm", spec, groups, cluster, lambda c: c, "gateway.networking.k8s.io/v1")
    assert weights == {"H100": round(100 * 2 * 4 * 6.76 * 1.2), "MI250": round(100 * 3 * 4 * 1.0 * 1.2)}
    assert [c["kind"] for c in cluster.applied] == ["Service", "Service", "HTTPRoute"]


def test_a_lent_class_keeps_its_backend_at_weight_zero_while_nothing_is_lent() -> None:
    spec = spec_with(inference=GATEWAY, training={"lendWhenIdle": True})
    status = TideDeploymentStatus(inference_pool=InferencePoolStatus(gpu_class="H100", replicas=2, replicas_ready=1),
                                  lending=LendingStatus(gpu_class="MI250", state="Idle"))
    groups = serving_groups(spec, placement("H100", "MI250"), StatusDraft(status, 1, datetime.now(UTC)),
                            DEFAULT_CATALOG)
    assert [(g.name, g.replicas, g.speedup) for g in groups] == [("H100", 1, 1.0), ("MI250", 0, 1.0)]


class ManagedRouteCluster(RouteCluster):
    """Also deletes: what it deleted, in order; a kind that fails, or that is not ours."""

    def __init__(self, served: str | None, failing: str = "", foreign: str = "") -> None:
        super().__init__(served)
        self.deleted: list[tuple[str, str]] = []
        self.failing, self.foreign = failing, foreign

    def delete_owned(self, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        assert owner_uid == "td-uid"
        if kind == self.failing:
            raise ApiException(status=503, reason="Service Unavailable")
        if kind == self.foreign:
            raise ChildConflict([Conflict(kind, name, ("Service/someone-else",))])
        self.deleted.append((kind, name))
        return True


def adopt(child: dict[str, Any]) -> dict[str, Any]:
    child["metadata"]["ownerReferences"] = [{"uid": "td-uid"}]
    return child


def lent_status(routing: RoutingStatus | None = None) -> TideDeploymentStatus:
    return TideDeploymentStatus(
        inference_pool=InferencePoolStatus(gpu_class="H100", replicas=1, replicas_ready=1),
        lending=LendingStatus(gpu_class="MI250", state="Lent", replicas=2, replicas_in_service=2),
        routing=routing)


ROUTED = RoutingStatus(route="chat-vllm", backends=(
    RouteBackend(gpu_class="H100", service="chat-vllm-h100", weight=2704),
    RouteBackend(gpu_class="MI250", service="chat-vllm-mi250", weight=800)))


def route_pass(spec: Any, status: TideDeploymentStatus, cluster: RouteCluster) -> StatusDraft:
    draft = StatusDraft(status, 1, datetime(2026, 12, 7, tzinfo=UTC))
    _, api_version = routing_of(spec, cluster)  # type: ignore[arg-type]
    route("chat", "llm", spec, placement("H100", "MI250"), draft, cluster, DEFAULT_CATALOG, adopt,  # type: ignore[arg-type]
          "td-uid", api_version)
    return draft


def test_status_names_the_route_and_each_class_weight() -> None:
    cluster = ManagedRouteCluster("gateway.networking.k8s.io/v1")
    draft = route_pass(spec_with(inference=GATEWAY, training={"lendWhenIdle": True}), lent_status(), cluster)
    routing = draft.status.routing
    assert routing is not None
    assert routing.route == "chat-vllm"
    assert [(b.gpu_class, b.service, b.weight) for b in routing.backends] == [
        ("H100", "chat-vllm-h100", round(100 * 4 * 6.76)), ("MI250", "chat-vllm-mi250", 100 * 2 * 4)]
    assert cluster.deleted == []


def test_removing_the_gateway_deletes_the_route_then_the_class_services() -> None:
    cluster = ManagedRouteCluster("gateway.networking.k8s.io/v1")
    draft = route_pass(spec_with(training={"lendWhenIdle": True}), lent_status(ROUTED), cluster)
    assert cluster.deleted == [("HTTPRoute", "chat-vllm"), ("Service", "chat-vllm-h100"),
                               ("Service", "chat-vllm-mi250")]
    assert cluster.applied == []
    assert draft.status.routing is None
    assert [e.reason for e in draft.events] == ["RoutingRemoved"]


def test_a_cluster_that_stops_serving_httproutes_loses_the_class_services_too() -> None:
    cluster = ManagedRouteCluster(None)  # the CRDs went, and the route with them
    draft = route_pass(spec_with(inference=GATEWAY), lent_status(ROUTED), cluster)
    assert [kind for kind, _ in cluster.deleted] == ["HTTPRoute", "Service", "Service"]
    assert draft.status.routing is None


def test_a_class_that_leaves_the_route_loses_its_service_and_the_route_stays() -> None:
    cluster = ManagedRouteCluster("gateway.networking.k8s.io/v1")
    draft = route_pass(spec_with(inference=GATEWAY), lent_status(ROUTED), cluster)  # lendWhenIdle switched off
    assert cluster.deleted == [("Service", "chat-vllm-mi250")]
    route_applied = [c for c in cluster.applied if c["kind"] == "HTTPRoute"]
    assert [b["name"] for b in route_applied[0]["spec"]["rules"][0]["backendRefs"]] == ["chat-vllm-h100"]
    assert draft.status.routing is not None
    assert [b.gpu_class for b in draft.status.routing.backends] == ["H100"]
    assert draft.events == []


def test_a_failed_delete_keeps_everything_listed_for_the_next_pass() -> None:
    cluster = ManagedRouteCluster("gateway.networking.k8s.io/v1", failing="HTTPRoute")
    draft = route_pass(spec_with(), lent_status(ROUTED), cluster)
    assert cluster.deleted == []  # no Service goes while the route that sends to it stays
    routing = draft.status.routing
    assert routing is not None
    assert [(b.gpu_class, b.weight) for b in routing.backends] == [("H100", 0), ("MI250", 0)]
    assert [(e.type, e.reason) for e in draft.events] == [("Warning", "RoutingCleanupFailed")]
    again = ManagedRouteCluster("gateway.networking.k8s.io/v1")
    assert route_pass(spec_with(), draft.status, again).status.routing is None
    assert [kind for kind, _ in again.deleted] == ["HTTPRoute", "Service", "Service"]


def test_a_child_that_is_not_ours_is_left_and_forgotten() -> None:
    cluster = ManagedRouteCluster("gateway.networking.k8s.io/v1", foreign="Service")
    draft = route_pass(spec_with(), lent_status(ROUTED), cluster)
    assert cluster.deleted == [("HTTPRoute", "chat-vllm")]
    assert draft.status.routing is None


def test_never_routed_and_no_gateway_asks_nothing() -> None:
    cluster = ManagedRouteCluster("gateway.networking.k8s.io/v1")
    draft = route_pass(spec_with(), lent_status(), cluster)
    assert (cluster.asked, cluster.applied, cluster.deleted) == (0, [], [])
    assert draft.status.routing is None
