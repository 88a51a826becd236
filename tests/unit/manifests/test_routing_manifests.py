"""Capacity-weighted routing (issue 17 item 2): a Service per GPU class and one HTTPRoute over them."""

from __future__ import annotations

import pytest
from manifest_fixtures import spec_with

from tide_operator.control.fleet import ClassGroup, capacity_weights
from tide_operator.manifests import labels
from tide_operator.manifests.routing import build_class_service, build_http_route

GATEWAY = {"gateway": {"name": "inference-gw", "namespace": "gateways", "sectionName": "https"}}


def test_each_class_gets_its_pods_by_the_class_label() -> None:
    service = build_class_service("chat", "llm", spec_with(), "MI250")
    assert service["metadata"]["name"] == "chat-vllm-mi250"
    assert service["spec"]["selector"] == {**labels.selector_labels("chat", labels.COMPONENT_INFERENCE),
                                           labels.GPU_CLASS_LABEL: "MI250"}  # serving and lent pods alike
    assert service["spec"]["ports"][0]["port"] == 8000


def test_the_route_attaches_to_the_gateway_and_weights_each_class() -> None:
    route = build_http_route("chat", "llm", spec_with(inference=GATEWAY), {"MI250": 260, "H100": 879},
                             "gateway.networking.k8s.io/v1")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["name"] == "chat-vllm"
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "inference-gw", "namespace": "gateways", "sectionName": "https"}]
    (rule,) = route["spec"]["rules"]
    assert [(b["name"], b["weight"], b["port"]) for b in rule["backendRefs"]] == [
        ("chat-vllm-h100", 879, 8000), ("chat-vllm-mi250", 260, 8000)]


def test_no_gateway_no_route() -> None:
    with pytest.raises(ValueError, match=r"inference\.gateway"):
        build_http_route("chat", "llm", spec_with(), {"H100": 1}, "gateway.networking.k8s.io/v1")


def test_weights_are_what_each_class_serves_now() -> None:
    # One H100 replica (6.76 per GPU) and two lent MI250 replicas (1.0), both at s = 1.3.
    groups = (ClassGroup("H100", 1, 1, 6.76, 1.3), ClassGroup("MI250", 2, 1, 1.0, 1.3))
    assert capacity_weights(groups) == {"H100": 879, "MI250": 260}
    # Lent beside serving on the same class: one backend, the replicas add up; none ready: weight 0.
    assert capacity_weights((ClassGroup("H100", 2, 1, 6.76), ClassGroup("H100", 1, 1, 6.76))) == {"H100": 2028}
    assert capacity_weights((ClassGroup("H100", 0, 1, 6.76),)) == {"H100": 0}
