"""Placement prefers, the scheduler decides: a pass creates the children whatever the free GPUs, and
says what is missing (Scheduled=False, WaitingForCapacity); the serving pods' PodDisruptionBudget is
a child like the others."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tide_operator.adapters.cluster import Applied
from tide_operator.config import OperatorConfig, StorageConfig
from tide_operator.control.placement import NodeInventory
from tide_operator.reconcile import reconcile

LENDS_TIDE = OperatorConfig(storage=StorageConfig(buckets=("tide",)))
UID = "td-uid"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
BODY = {"metadata": {"name": "chat", "namespace": "team", "uid": UID, "generation": 1},
        "spec": {"target": {"model": "m", "revision": "r1"}, "draft": {"initial": "s3://tide/drafts/base"},
                 "inference": {"replicas": 3, "gpusPerReplica": 2},
                 "storage": {"s3": {"bucket": "tide"}}}}


class RecordingCluster:
    """Nodes as given, no live children (unless given), every write recorded."""

    def __init__(self, nodes: list[NodeInventory], live: dict[tuple[str, str], dict] | None = None,
                 policy_version: str = "policy/v1beta1") -> None:
        self.nodes, self.live, self.policy_version = nodes, live or {}, policy_version
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []
        self.serving_pods: list[dict[str, Any]] = []

    def node_inventory(self, exclude: Any = None) -> list[NodeInventory]:
        return self.nodes

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.live.get((kind, name))

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.serving_pods

    def apply(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> Applied:
        self.applied.append(desired)
        return Applied(desired["kind"], desired["metadata"]["name"], "created")

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        return {"status": {"readyReplicas": 0}}

    def disruption_budget_api_version(self) -> str:
        return self.policy_version

    def delete_owned(self, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        self.deleted.append((kind, name))
        return True

    def kinds(self) -> list[str]:
        return [child["kind"] for child in self.applied]

    def child(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.applied if c["kind"] == kind)


def body_with(**inference: Any) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    body["spec"]["inference"].update(inference)
    return body


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


@pytest.mark.parametrize(("case", "nodes", "missing"), [
    ("zero GPU nodes (a pool autoscaled to zero)", [NodeInventory("cpu-0", {}, {})], "room now for 0"),
    ("fewer free GPUs than the replicas need", [NodeInventory("h100-0", H100, {"nvidia.com/gpu": 4})],
     "room now for 2 (free GPUs: h100-0=4)"),
])
def test_the_deployment_is_created_without_capacity_and_the_status_says_what_is_missing(
        case: str, nodes: list[NodeInventory], missing: str) -> None:
    cluster = RecordingCluster(nodes)
    result = reconcile(body_with(), cluster, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    assert cluster.kinds() == ["Secret", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget"]
    scheduled = condition(result.status, "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "WaitingForCapacity")
    assert "need 3 x 2 GPUs on single nodes of H200, H100, A100, L40S" in scheduled["message"]
    assert missing in scheduled["message"]
    ready = condition(result.status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForReplicas")
    assert result.status["phase"] == "Pending"  # not Invalid, Failed or Degraded
    assert not any(c["type"] == "Degraded" and c["status"] == "True" for c in result.status["conditions"])
    assert result.status["inferencePool"]["gpuClass"] in ("H200", "H100")
    pod = cluster.child("Deployment")["spec"]["template"]["spec"]
    assert pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert not [e for e in result.events if e.type == "Warning"]


def test_room_for_every_replica_is_scheduled_true() -> None:
    cluster = RecordingCluster([NodeInventory(f"h100-{i}", H100, {"nvidia.com/gpu": 8}) for i in range(2)])
    result = reconcile(body_with(), cluster, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    scheduled = condition(result.status, "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("True", "PoolsChosen")
    assert scheduled["message"].startswith("inference on H100: fastest inference class with room")
    assert result.status["inferencePool"] == {"gpuClass": "H100", "nodes": 2, "replicas": 3, "replicasReady": 0}


def test_the_disruption_budget_follows_the_spec_and_the_served_api_version() -> None:
    cluster = RecordingCluster([], policy_version="policy/v1beta1")
    reconcile(body_with(), cluster, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    budget = cluster.child("PodDisruptionBudget")
    assert budget["apiVersion"] == "policy/v1beta1"
    assert budget["metadata"]["name"] == "chat-vllm"
    assert budget["spec"] == {"selector": {"matchLabels": {"app.kubernetes.io/component": "inference",
                                                           "tide.dev/deployment": "chat"}}, "maxUnavailable": 1}
    cluster = RecordingCluster([], policy_version="policy/v1")
    reconcile(body_with(disruption={"minAvailable": "50%"}), cluster, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    budget = cluster.child("PodDisruptionBudget")
    assert (budget["apiVersion"], budget["spec"]["minAvailable"]) == ("policy/v1", "50%")
    assert "maxUnavailable" not in budget["spec"]


def test_a_disabled_budget_is_not_applied_and_ours_is_deleted() -> None:
    ours = {"metadata": {"name": "chat-vllm", "ownerReferences": [{"kind": "TideDeployment", "uid": UID}]}}
    cluster = RecordingCluster([], live={("PodDisruptionBudget", "chat-vllm"): ours})
    result = reconcile(body_with(disruption={"enabled": False}), cluster, LENDS_TIDE,
                       adopt=lambda c: c)  # type: ignore[arg-type]
    assert "PodDisruptionBudget" not in cluster.kinds()
    assert cluster.deleted == [("PodDisruptionBudget", "chat-vllm")]
    assert Applied("PodDisruptionBudget", "chat-vllm", "deleted") in result.applied
    nothing = RecordingCluster([])
    reconcile(body_with(disruption={"enabled": False}), nothing, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    assert nothing.deleted == []


def test_a_foreign_budget_of_that_name_is_a_child_conflict_and_nothing_is_written() -> None:
    foreign = {"metadata": {"name": "chat-vllm", "ownerReferences": []}}
    cluster = RecordingCluster([], live={("PodDisruptionBudget", "chat-vllm"): foreign})
    result = reconcile(body_with(), cluster, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    degraded = condition(result.status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ChildConflict")
    assert "PodDisruptionBudget chat-vllm exists with no owner" in degraded["message"]
    assert cluster.applied == []


def test_an_invalid_budget_names_the_field_and_writes_nothing() -> None:
    cluster = RecordingCluster([])
    result = reconcile(body_with(disruption={"maxUnavailable": 1, "minAvailable": 1}), cluster, LENDS_TIDE,
                       adopt=lambda c: c)  # type: ignore[arg-type]
    assert result.status["phase"] == "Invalid"
    assert condition(result.status, "Ready")["message"].startswith("spec.inference.disruption:")
    assert cluster.applied == []


def serving_pod(name: str, gpu_class: str, node: str | None, phase: str = "Running",
                deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"tide.dev/gpu-class": gpu_class}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def test_serving_nodes_not_ready_for_a_moment_move_nothing() -> None:
    # The H100 nodes' heartbeats are late (NotReady, so not schedulable); the MI250 node has room.
    late = [NodeInventory(f"h100-{i}", H100, {"nvidia.com/gpu": 8}, schedulable=False) for i in range(2)]
    mi250 = NodeInventory("mi250-0", {"amd.com/gpu.product-name": "AMD_Instinct_MI250X_MI250"}, {"amd.com/gpu": 8})
    body = body_with(replicas=2, gpusPerReplica=1)
    body["status"] = {"inferencePool": {"gpuClass": "H100", "nodes": 2, "replicas": 2, "replicasReady": 2}}

    cluster = RecordingCluster([*late, mi250])
    cluster.serving_pods = [serving_pod("a", "H100", "h100-0"), serving_pod("b", "H100", "h100-1"),
                            serving_pod("c", "H100", "h100-1", deleting=True)]
    result = reconcile(body, cluster, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    assert result.status["inferencePool"]["gpuClass"] == "H100"
    labels = cluster.child("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert labels["tide.dev/gpu-class"] == "H100"  # the template did not change: no pod restarts

    # A replica that cannot be placed (Pending, no node), the other being deleted: the class may move.
    cluster = RecordingCluster([*late, mi250])
    cluster.serving_pods = [serving_pod("a", "H100", "h100-0"), serving_pod("b", "H100", None, phase="Pending"),
                            serving_pod("c", "H100", "h100-1", deleting=True)]
    result = reconcile(body, cluster, LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    assert result.status["inferencePool"]["gpuClass"] == "MI250"
