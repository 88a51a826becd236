"""The least-privilege rules the operator needs (the chart's ClusterRole renders these)."""

from __future__ import annotations

from typing import Any

from tide_operator.api import GROUP, PLURAL

CHILD_VERBS = ["get", "list", "watch", "create", "patch", "delete"]


def operator_rules() -> list[dict[str, Any]]:
    return [
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch"]},
        # blockOwnerDeletion on children needs update on the owner's finalizers subresource.
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": CHILD_VERBS},
        {"apiGroups": [""], "resources": ["services", "configmaps"], "verbs": CHILD_VERBS},
        # Secrets: the control-token Secret it creates, and reading the S3 credentials Secret named in a spec.
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": CHILD_VERBS},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        # Kopf's cluster-wide scanning of CRDs and namespaces.
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    ]


def cluster_role(name: str = "tide-operator") -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": operator_rules()}
