"""spec.inference.disruption: validation naming the field, the PodDisruptionBudget built from it, and
the policy version discovered from the API server (policy/v1, or policy/v1beta1 on Kubernetes 1.20)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from manifest_fixtures import spec_with

from tide_operator.adapters import cluster as cluster_module
from tide_operator.api import SpecError
from tide_operator.manifests.disruption import build_disruption_budget


@pytest.mark.parametrize(("disruption", "budget"), [
    ({}, {"maxUnavailable": 1}),
    ({"maxUnavailable": 0}, {"maxUnavailable": 0}),
    ({"maxUnavailable": "25%"}, {"maxUnavailable": "25%"}),
    ({"minAvailable": 2}, {"minAvailable": 2}),
    ({"minAvailable": "100%"}, {"minAvailable": "100%"}),
])
def test_budget_from_the_spec(disruption: dict[str, Any], budget: dict[str, Any]) -> None:
    pdb = build_disruption_budget("chat", "llm", spec_with(inference={"disruption": disruption}), "policy/v1")
    assert pdb is not None
    assert (pdb["apiVersion"], pdb["kind"]) == ("policy/v1", "PodDisruptionBudget")
    assert (pdb["metadata"]["name"], pdb["metadata"]["namespace"]) == ("chat-vllm", "llm")
    assert pdb["spec"] == {"selector": {"matchLabels": {"app.kubernetes.io/component": "inference",
                                                        "tide.dev/deployment": "chat"}}, **budget}


def test_disabled_builds_nothing() -> None:
    assert build_disruption_budget("chat", "llm", spec_with(inference={"disruption": {"enabled": False}}),
                                   "policy/v1") is None


@pytest.mark.parametrize(("disruption", "field", "words"), [
    ({"maxUnavailable": 1, "minAvailable": "50%"}, "spec.inference.disruption", "at most one"),
    ({"maxUnavailable": -1}, "spec.inference.disruption.maxUnavailable", "between 0 and 64"),
    ({"minAvailable": 65}, "spec.inference.disruption.minAvailable", "between 0 and 64"),
    ({"maxUnavailable": "101%"}, "spec.inference.disruption.maxUnavailable", "percentage"),
    ({"minAvailable": "2Gi"}, "spec.inference.disruption.minAvailable", "percentage"),
    ({"maxUnavailable": True}, "spec.inference.disruption.maxUnavailable", "integer"),
    ({"enabled": "no"}, "spec.inference.disruption.enabled", "boolean"),
])
def test_invalid_values_name_the_field(disruption: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        spec_with(inference={"disruption": disruption})
    assert refused.value.field == field
    assert words in refused.value.message


class _Policy:
    calls = 0

    def __init__(self, served: tuple[str, ...]) -> None:
        self.served = served

    def __call__(self, api: Any) -> _Policy:
        return self

    def get_api_group(self) -> Any:
        _Policy.calls += 1
        return SimpleNamespace(versions=[SimpleNamespace(group_version=v) for v in self.served])


@pytest.mark.parametrize(("served", "chosen"), [
    (("policy/v1beta1",), "policy/v1beta1"),  # Kubernetes 1.20 (the local plane)
    (("policy/v1", "policy/v1beta1"), "policy/v1"),  # 1.21 to 1.24
    (("policy/v1",), "policy/v1"),  # 1.25 and later
])
def test_the_policy_version_is_discovered_once_per_api_server(monkeypatch: pytest.MonkeyPatch,
                                                             served: tuple[str, ...], chosen: str) -> None:
    monkeypatch.setattr(cluster_module.client, "PolicyApi", _Policy(served))
    monkeypatch.setattr(cluster_module, "_POLICY_VERSION", {})
    _Policy.calls = 0
    api = SimpleNamespace(configuration=SimpleNamespace(host="https://k8s.example:6443"))
    adapter = cluster_module.Cluster.__new__(cluster_module.Cluster)
    adapter.api = api  # type: ignore[assignment]
    assert adapter.disruption_budget_api_version() == chosen
    assert adapter.disruption_budget_api_version() == chosen
    assert _Policy.calls == 1


def test_no_served_version_is_an_api_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module.client, "PolicyApi", _Policy(("policy/v2alpha9",)))
    monkeypatch.setattr(cluster_module, "_POLICY_VERSION", {})
    adapter = cluster_module.Cluster.__new__(cluster_module.Cluster)
    adapter.api = SimpleNamespace(configuration=SimpleNamespace(host="h"))  # type: ignore[assignment]
    with pytest.raises(cluster_module.ApiException, match="no PodDisruptionBudget version"):
        adapter.disruption_budget_api_version()
