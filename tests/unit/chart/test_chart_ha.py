"""High availability in the chart: two replicas, one leader through a Lease only the operator may write."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_render import NAMESPACE, only, render

from tide_operator.config import load_operator_config
from tide_operator.rbac import leader_election_rbac

pytest.importorskip("helm_python")


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render()


def lease_role(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects
            if o["kind"] in ("Role", "RoleBinding") and o["metadata"]["name"].endswith("-leader-election")]


def operator_config(objects: list[dict[str, Any]]) -> Any:
    return load_operator_config(yaml.safe_load(only(objects, "ConfigMap")["data"]["config.yaml"]))


def test_two_replicas_roll_without_ever_dropping_below_two(default: list[dict[str, Any]]) -> None:
    spec = only(default, "Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_a_disruption_budget_keeps_one_operator_pod(default: list[dict[str, Any]]) -> None:
    budget = only(default, "PodDisruptionBudget")
    deployment = only(default, "Deployment")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert "PodDisruptionBudget" not in [o["kind"] for o in render({"replicaCount": 1})]  # would block every drain


def test_replicas_prefer_different_nodes_unless_affinity_is_given(default: list[dict[str, Any]]) -> None:
    pod = only(default, "Deployment")["spec"]["template"]
    [term] = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}}
    assert only(render({"affinity": mine}), "Deployment")["spec"]["template"]["spec"]["affinity"] == mine


def test_the_lease_is_in_the_release_namespace_and_only_its_own_is_writable(default: list[dict[str, Any]]) -> None:
    container = only(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    pod_namespace = next(e for e in container["env"] if e["name"] == "POD_NAMESPACE")
    assert pod_namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    election = operator_config(default).leader_election
    assert election.enabled
    assert election.lease_namespace is None  # -> POD_NAMESPACE
    role, binding = lease_role(default)
    account = only(default, "ServiceAccount")["metadata"]["name"]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    expected = leader_election_rbac(NAMESPACE, subject, role["metadata"]["name"], election.lease_name)
    assert [{k: v for k, v in o.items() if k != "metadata"} for o in (role, binding)] == \
        [{k: v for k, v in o.items() if k != "metadata"} for o in expected]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    named = [r for r in role["rules"] if "resourceNames" in r]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": [election.lease_name], "verbs": ["get", "update"]}]
    [unnamed] = [r for r in role["rules"] if "resourceNames" not in r]
    assert unnamed["verbs"] == ["create"]  # the API cannot limit create by name
    assert not any("leases" in r["resources"] for r in only(default, "ClusterRole")["rules"])


def test_a_configured_lease_name_and_namespace_reach_both_config_and_role() -> None:
    objects = render({"config": {"leaderElection": {"leaseName": "ops-lease", "leaseNamespace": "ops"}}})
    election = operator_config(objects).leader_election
    assert (election.lease_name, election.lease_namespace) == ("ops-lease", "ops")
    role, binding = lease_role(objects)
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "ops"
    assert [r.get("resourceNames") for r in role["rules"]] == [["ops-lease"], None]


def test_no_lease_role_when_leader_election_is_off() -> None:
    objects = render({"replicaCount": 1, "config": {"leaderElection": {"enabled": False}}})
    assert lease_role(objects) == []
    assert operator_config(objects).leader_election.enabled is False
