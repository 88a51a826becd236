"""The operator's least-privilege RBAC: one source for the chart, the local plane and the tests.

Every verb here is one the operator (or Kopf for it) calls; the integration test
``test_rbac_namespaced.py`` derives the calls from the apiserver's audit log and holds these rules
to exactly them, or to ``UNSEEN_IN_A_SERVING_RUN`` with the reason each is not in that run.
The chart renders ``files/rbac/rules.yaml``, written by ``python -m tide_operator.rbac``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tide_operator.api import GROUP, PLURAL

RBAC_API = "rbac.authorization.k8s.io"
Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


@dataclass(frozen=True)
class Grant:
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str
    resource_names: tuple[str, ...] = ()  # empty: every object of the resources

    def rule(self) -> dict[str, Any]:
        named = {"resourceNames": list(self.resource_names)} if self.resource_names else {}
        return {"apiGroups": [self.group], "resources": list(self.resources), **named, "verbs": list(self.verbs)}


# In each watched namespace: a Role there, or part of the ClusterRole when cluster-wide.
NAMESPACED = (
    Grant(GROUP, (PLURAL,), ("list", "watch", "patch"),
          "Kopf watches TideDeployments and patches its progress annotations and finalizer onto them"),
    Grant(GROUP, (f"{PLURAL}/status",), ("patch",), "the status, written once per pass"),
    Grant(GROUP, (f"{PLURAL}/finalizers",), ("update",),
          "no request uses it: where OwnerReferencesPermissionEnforcement is on (OpenShift), a child "
          "with blockOwnerDeletion needs it on its owner"),
    Grant("apps", ("deployments",), ("get", "list", "watch", "create", "patch", "delete"),
          "the vLLM Deployments: watched (ours, by label) for the passes' cache, read by name when the cache has "
          "none, created if absent, their drift patched; a serving Deployment that leaves (inference.servingGroups "
          "switched on or off, a class out of the groups) deleted once the others serve, ours only; garbage "
          "collection deletes the rest"),
    Grant("", ("services", "configmaps"), ("get", "create", "patch"),
          "the vLLM Service and ConfigMap, like the Deployment"),
    Grant("", ("services",), ("delete",),
          "inference.gateway: a GPU class's Service once the class leaves the HTTPRoute or the gateway leaves the "
          "spec (read first: only one with the TideDeployment's UID)"),
    Grant("", ("secrets",), ("get", "create", "patch"),
          "the control-token Secret: created, rotated on tide.dev/rotate-token; reading the S3 credentials "
          "Secret a spec names"),
    Grant("policy", ("poddisruptionbudgets",), ("get", "create", "patch", "delete"),
          "the vLLM pods' PodDisruptionBudget: like the Deployment; deleted when spec.inference.disruption "
          "is disabled"),
    Grant("batch", ("jobs",), ("get", "list", "watch", "create", "delete"),
          "trainer Jobs: read before create or delete (owner UID); watched for the training sensor's cache"),
    Grant("", ("events",), ("create",), "Kopf posts core/v1 Events, one per decision"),
    Grant("gateway.networking.k8s.io", ("httproutes",), ("get", "create", "patch", "delete"),
          "inference.gateway: the HTTPRoute that weights each GPU class's Service by capacity, like the Deployment; "
          "deleted once the gateway leaves the spec"),
    Grant("", ("pods/status",), ("patch",),
          "training.lendWhenIdle: the lent vLLM pods' readiness gate (tide.dev/serving), set True once a pod is "
          "ready and False before it is drained; no other field of a pod's status is written"),
)

# Across the cluster in both modes: what placement reads, and Kopf's discovery of the CRD.
CLUSTER = (
    Grant("", ("nodes",), ("list", "watch"), "GPU nodes, their labels and allocatable GPUs (placement's cache)"),
    Grant("", ("pods",), ("list", "watch"),
          "GPUs already requested on each node by pods of every namespace (placement: watched, or listed by "
          "an operator that watches listed namespaces); a deployment's own pods (watched)"),
    Grant("apiextensions.k8s.io", ("customresourcedefinitions",), ("list", "watch"),
          "Kopf notices the TideDeployment CRD installed or changed after the operator started"),
)

# Only when watching listed namespaces (cluster-wide Kopf does not look at namespaces).
NAMESPACE_SCANNING = (
    Grant("", ("namespaces",), ("list", "watch"),
          "Kopf starts and stops watching a listed namespace as it is created or deleted"),
)

# Only in the operator's own namespace, as a Role there: the leader Lease (docs/operating.md, high
# availability). The chart puts its lease name in resourceNames.
LEASE_NAME = "tide-operator"  # config.LeaderElectionConfig's default lease_name
LEADER_ELECTION = (
    Grant("coordination.k8s.io", ("leases",), ("get", "update"),
          "the leader Lease: followers read it, the leader renews and releases it; this one Lease only",
          resource_names=(LEASE_NAME,)),
    Grant("coordination.k8s.io", ("leases",), ("create",),
          "the first replica creates the leader Lease; create cannot be limited by resourceNames (the "
          "name is in the body, not the URL), so this Role lives only in the operator's namespace"),
)

# Granted but not called in the namespaced serving run that the audit test records, and why.
UNSEEN_IN_A_SERVING_RUN: dict[Permission, str] = {
    (GROUP, f"{PLURAL}/finalizers", "update"): "an authorization check at admission, never a request",
    ("", "secrets", "patch"): "only a token rotation patches the Secret (test_control_token_rotation)",
    ("policy", "poddisruptionbudgets", "delete"): "only disabling spec.inference.disruption deletes the budget "
                                                  "(unit: test_reconcile_capacity)",
    ("batch", "jobs", "create"): "a trainer Job starts only once enough captures are buffered (test_promotion)",
    ("batch", "jobs", "delete"): "a trainer Job the control loop cancels (unit: test_effect_reasons)",
    ("gateway.networking.k8s.io", "httproutes", "get"): "only a spec with inference.gateway on a cluster with the "
                                                         "Gateway API's CRDs routes by capacity (test_lending)",
    ("gateway.networking.k8s.io", "httproutes", "create"): "as get (test_lending)",
    ("gateway.networking.k8s.io", "httproutes", "patch"): "as get: the weights change with the pods in service",
    ("gateway.networking.k8s.io", "httproutes", "delete"): "only removing inference.gateway deletes the route "
                                                            "(test_lending)",
    ("", "services", "delete"): "as the HTTPRoute's delete (test_lending; unit: test_routing_pass)",
    ("apps", "deployments", "delete"): "only a serving Deployment that leaves (inference.servingGroups switched "
                                       "on or off) is deleted (test_serving_groups; unit: test_serving_groups_pass)",
    ("", "pods/status", "patch"): "only lent replicas (training.lendWhenIdle) get their readiness gate set "
                                  "(unit: test_lending_pass)",
}


def rules(grants: Iterable[Grant]) -> list[dict[str, Any]]:
    return [g.rule() for g in grants]


def operator_rules() -> list[dict[str, Any]]:
    """The ClusterRole's rules when the operator watches every namespace."""
    return rules(NAMESPACED + CLUSTER)


def namespaced_rules() -> list[dict[str, Any]]:
    """The Role's rules in each watched namespace."""
    return rules(NAMESPACED)


def cluster_rules() -> list[dict[str, Any]]:
    """The ClusterRole's rules when the operator watches listed namespaces."""
    return rules(CLUSTER + NAMESPACE_SCANNING)


def permissions(rule_list: Iterable[dict[str, Any]]) -> set[Permission]:
    return {(group, resource, verb) for rule in rule_list for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def cluster_role(name: str = "tide-operator") -> dict[str, Any]:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": operator_rules()}


def namespaced_rbac(namespaces: Sequence[str], subject: dict[str, Any],
                    name: str = "tide-operator") -> list[dict[str, Any]]:
    """A Role and RoleBinding per watched namespace, and the ClusterRole for what is cluster-wide."""
    objects: list[dict[str, Any]] = [_role("ClusterRole", name, None, cluster_rules()),
                                     _binding("ClusterRoleBinding", name, None, subject)]
    for namespace in namespaces:
        objects += [_role("Role", name, namespace, namespaced_rules()),
                    _binding("RoleBinding", name, namespace, subject)]
    return objects


def leader_election_rbac(namespace: str, subject: dict[str, Any], name: str = "tide-operator",
                         lease_name: str = LEASE_NAME) -> list[dict[str, Any]]:
    """The Role and RoleBinding for the leader Lease, in the operator's own namespace."""
    lease_rules = [{**rule, "resourceNames": [lease_name]} if "resourceNames" in rule else rule
                   for rule in rules(LEADER_ELECTION)]
    return [_role("Role", name, namespace, lease_rules), _binding("RoleBinding", name, namespace, subject)]


def _role(kind: str, name: str, namespace: str | None, rule_list: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": kind, "metadata": _meta(name, namespace), "rules": rule_list}


def _binding(kind: str, name: str, namespace: str | None, subject: dict[str, Any]) -> dict[str, Any]:
    role_kind = "ClusterRole" if kind == "ClusterRoleBinding" else "Role"
    return {"apiVersion": f"{RBAC_API}/v1", "kind": kind, "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": RBAC_API, "kind": role_kind, "name": name}, "subjects": [subject]}


def _meta(name: str, namespace: str | None) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def chart_rules_yaml() -> str:
    """The chart's ``files/rbac/rules.yaml``: each rule under a comment saying why it is there."""
    lines = ["# Generated by `python -m tide_operator.rbac` from tide_operator/rbac.py: do not edit."]
    for key, grants in (("namespaced", NAMESPACED), ("cluster", CLUSTER), ("namespaceScanning", NAMESPACE_SCANNING),
                        ("leaderElection", LEADER_ELECTION)):
        lines.append(f"{key}:")
        for grant in grants:
            lines.append(f"  # {grant.why}")
            lines.append("  - " + yaml.safe_dump(grant.rule(), default_flow_style=True, width=200).strip())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(chart_rules_yaml())
