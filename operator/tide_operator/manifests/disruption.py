"""The PodDisruptionBudget of the vLLM pods (``spec.inference.disruption``).

A drain or an autoscaler's scale-down evicts through the eviction API, which honours the budget:
by default at most one serving pod is taken at a time, as the Deployment's own rolling update does.
The API version is the one the API server serves (policy/v1 since Kubernetes 1.21, only
policy/v1beta1 on 1.20): the caller discovers it.
"""

from __future__ import annotations

from typing import Any

from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.manifests import labels, names

KIND = "PodDisruptionBudget"
DEFAULT_MAX_UNAVAILABLE = 1


def budget(spec: TideDeploymentSpec) -> dict[str, int | str]:
    """``{"minAvailable": x}`` when the spec sets it, else ``{"maxUnavailable": x}`` (default 1)."""
    disruption = spec.inference.disruption
    if disruption.min_available is not None:
        return {"minAvailable": disruption.min_available}
    return {"maxUnavailable": DEFAULT_MAX_UNAVAILABLE if disruption.max_unavailable is None
            else disruption.max_unavailable}


def build_disruption_budget(td_name: str, namespace: str, spec: TideDeploymentSpec,
                            api_version: str) -> dict[str, Any] | None:
    """The budget over the serving pods' selector; None when ``disruption.enabled`` is false."""
    if not spec.inference.disruption.enabled:
        return None
    return {
        "apiVersion": api_version,
        "kind": KIND,
        "metadata": {
            "name": names.disruption_budget_name(td_name),
            "namespace": namespace,
            "labels": labels.serving_labels(td_name),
        },
        "spec": {
            "selector": {"matchLabels": labels.selector_labels(td_name, labels.COMPONENT_INFERENCE)},
            **budget(spec),
        },
    }
