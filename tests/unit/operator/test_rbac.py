"""The operator's RBAC (tide_operator.rbac): what is granted where, and that every grant says why."""

from __future__ import annotations

from tide_operator import rbac

SUBJECT = {"kind": "ServiceAccount", "name": "tide", "namespace": "tide-system"}


def test_the_cluster_wide_role_is_the_namespaced_grants_plus_the_cluster_reads() -> None:
    assert rbac.operator_rules() == rbac.namespaced_rules() + rbac.rules(rbac.CLUSTER)
    assert rbac.cluster_role()["rules"] == rbac.operator_rules()


def test_with_watched_namespaces_nothing_but_reads_is_cluster_wide() -> None:
    cluster_wide = rbac.permissions(rbac.cluster_rules())
    assert {verb for _, _, verb in cluster_wide} == {"list", "watch"}
    assert {resource for _, resource, _ in cluster_wide} == {"nodes", "pods", "customresourcedefinitions",
                                                             "namespaces"}


def test_secrets_are_created_read_and_patched_only_in_watched_namespaces() -> None:
    # patch: the control-token Secret's rotation (tide.dev/rotate-token); no list, watch or delete.
    assert {verb for _, resource, verb in rbac.permissions(rbac.namespaced_rules()) if resource == "secrets"} \
        == {"get", "create", "patch"}
    assert not any(resource == "secrets" for _, resource, _ in rbac.permissions(rbac.cluster_rules()))


def test_namespaced_rbac_binds_a_role_in_each_namespace_and_one_cluster_role() -> None:
    objects = rbac.namespaced_rbac(["a", "b"], SUBJECT, "tide")
    assert [(o["kind"], o["metadata"].get("namespace")) for o in objects] == [
        ("ClusterRole", None), ("ClusterRoleBinding", None),
        ("Role", "a"), ("RoleBinding", "a"), ("Role", "b"), ("RoleBinding", "b")]
    for binding in (o for o in objects if o["kind"].endswith("Binding")):
        assert binding["subjects"] == [SUBJECT]
        assert binding["roleRef"]["kind"] == binding["kind"].removesuffix("Binding")


def test_every_grant_says_why_and_every_unseen_verb_is_granted() -> None:
    grants = rbac.NAMESPACED + rbac.CLUSTER + rbac.NAMESPACE_SCANNING
    assert all(g.why for g in grants)
    granted = rbac.permissions(rbac.rules(grants))
    assert set(rbac.UNSEEN_IN_A_SERVING_RUN) <= granted
    assert all(rbac.UNSEEN_IN_A_SERVING_RUN.values())


# Granted before issue 12, never called: Kopf lists and watches, garbage collection deletes children.
# (Secret patch came back with token rotation, issue 12 item 7.)
REMOVED = [
    # Pods, nodes, Jobs and Deployments are watched into caches (watch_cache.py): their list and watch verbs
    # are back on purpose. Deployments' delete is back too: a serving group's Deployment retires.
    ("", "pods", "get"),
    ("", "nodes", "get"), ("tide.dev", "tidedeployments", "get"), ("", "events", "patch"),
    ("events.k8s.io", "events", "create"), ("batch", "jobs", "patch"),
]


def test_no_verb_the_operator_never_calls_is_back() -> None:
    granted = rbac.permissions(rbac.operator_rules() + rbac.cluster_rules())
    assert [p for p in REMOVED if p in granted] == []


def test_leases_are_granted_only_in_the_operator_namespace_and_by_name_where_the_api_allows() -> None:
    everywhere_else = rbac.permissions(rbac.operator_rules() + rbac.cluster_rules() + rbac.namespaced_rules())
    assert not any(resource == "leases" for _, resource, _ in everywhere_else)
    role, binding = rbac.leader_election_rbac("tide-system", SUBJECT, "tide", lease_name="tide-lease")
    assert (role["kind"], role["metadata"]) == ("Role", {"name": "tide", "namespace": "tide-system"})
    assert binding["subjects"] == [SUBJECT]
    assert binding["roleRef"]["name"] == "tide"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["tide-lease"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
