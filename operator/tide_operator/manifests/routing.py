"""Capacity-weighted routing (inference.gateway): a Service per GPU class and one HTTPRoute over them.

A plain Service gives every pod the same request rate, so a slow pod (an MI250 beside H100s) would hold
the fleet to its pace. The HTTPRoute weights each class's Service by what its ready replicas serve
(control/fleet.capacity_weights); the Gateway API implementation splits requests by those weights,
and the Service of each class spreads them over that class's pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.manifests import labels, names
from tide_operator.manifests.serving import PORT_NAME

GATEWAY_GROUP = "gateway.networking.k8s.io"
HTTP_ROUTE = "HTTPRoute"
ROUTE_VERSIONS = ("v1", "v1beta1")  # the first the cluster serves (v1: Gateway API 1.0 and later)


def build_class_service(td_name: str, namespace: str, spec: TideDeploymentSpec, gpu_class: str) -> dict[str, Any]:
    """ClusterIP Service of the vLLM pods on ``gpu_class`` (serving or lent alike)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.class_service_name(td_name, gpu_class),
            "namespace": namespace,
            "labels": {**labels.serving_labels(td_name), labels.GPU_CLASS_LABEL: gpu_class},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {**labels.selector_labels(td_name, labels.COMPONENT_INFERENCE),
                         labels.GPU_CLASS_LABEL: gpu_class},
            "ports": [{"name": PORT_NAME, "port": spec.inference.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def build_http_route(td_name: str, namespace: str, spec: TideDeploymentSpec, weights: Mapping[str, int],
                     api_version: str) -> dict[str, Any]:
    """The HTTPRoute on spec.inference.gateway, one backend per class in ``weights`` (a class with no
    ready replica keeps its backend at weight 0, so the route does not change shape as pods come and go)."""
    gateway = spec.inference.gateway
    if gateway is None:
        raise ValueError("spec.inference.gateway is not set: no HTTPRoute to build")
    parent: dict[str, Any] = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": gateway.name}
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    backends = [{"group": "", "kind": "Service", "name": names.class_service_name(td_name, gpu_class),
                 "port": spec.inference.port, "weight": weight}
                for gpu_class, weight in sorted(weights.items())]
    return {
        "apiVersion": api_version,
        "kind": HTTP_ROUTE,
        "metadata": {"name": names.serving_name(td_name), "namespace": namespace,
                     "labels": labels.serving_labels(td_name)},
        "spec": {"parentRefs": [parent], "rules": [{"backendRefs": backends}]},
    }
