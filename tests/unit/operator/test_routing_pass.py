"""Which routing the control pass uses (issue 17 item 2), and the groups it weights."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tide_operator.api.status import InferencePoolStatus, LendingStatus, SpeculationStatus, TideDeploymentStatus
from tide_operator.catalog import DEFAULT_CATALOG
from tide_operator.control.fleet import Routing
from tide_operator.passes.routing import apply_routes, routing_of, serving_groups
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
