"""Serving groups in the reconcile pass: a Deployment per class, the split in status, and a migration
from the one Deployment (and back) that never drops what serves."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes.client.exceptions import ApiException

from tide_operator.adapters.cluster import Applied
from tide_operator.config import OperatorConfig, StorageConfig
from tide_operator.control.placement import NodeInventory
from tide_operator.manifests.ownership import ChildConflict
from tide_operator.reconcile import reconcile

CONFIG = OperatorConfig(storage=StorageConfig(buckets=("tide",)))
UID = "td-uid"
NODES = [NodeInventory("h100-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 2}),
         NodeInventory("mi250-0", {"amd.com/gpu.device-id": "740c"}, {"amd.com/gpu": 8})]
GROUPS = [{"gpuClass": "H100"}, {"gpuClass": "MI250", "maxReplicas": 2}]
BODY = {"metadata": {"name": "chat", "namespace": "team", "uid": UID, "generation": 1},
        "spec": {"target": {"model": "m", "revision": "r1"}, "draft": {"initial": "s3://tide/drafts/base"},
                 "inference": {"replicas": 4, "servingGroups": GROUPS}, "storage": {"s3": {"bucket": "tide"}}}}
OURS = [{"uid": UID, "controller": True}]


class GroupCluster:
    """Live serving Deployments with their ready replicas; scales and deletes recorded and carried out."""

    def __init__(self, live: dict[str, dict[str, Any]] | None = None) -> None:
        self.live = live or {}
        self.applied: list[dict[str, Any]] = []
        self.scaled: list[tuple[str, int]] = []
        self.deleted: list[str] = []
        self.fail_delete = False

    def node_inventory(self, exclude: Any = None) -> list[NodeInventory]:
        return NODES

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.live.get(name) if kind == "Deployment" else None

    def deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.live.get(name)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    def apply(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> Applied:
        self.applied.append(desired)
        if desired["kind"] == "Deployment":
            ready = self.live.get(desired["metadata"]["name"], {}).get("status", {})
            self.live[desired["metadata"]["name"]] = {**copy.deepcopy(desired), "status": ready,
                                                      "metadata": {**desired["metadata"], "ownerReferences": OURS}}
        return Applied(desired["kind"], desired["metadata"]["name"], "created")

    def disruption_budget_api_version(self) -> str:
        return "policy/v1"

    def scale_owned(self, namespace: str, name: str, replicas: int, owner_uid: str) -> None:
        self.scaled.append((name, replicas))
        self.live[name]["spec"]["replicas"] = replicas

    def delete_owned(self, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        if kind != "Deployment":
            return False
        if self.fail_delete:
            raise ApiException(status=500, reason="etcd timeout")
        if self.live[name]["metadata"].get("ownerReferences") != OURS:
            raise ChildConflict([])
        self.deleted.append(name)
        del self.live[name]
        return True

    def ready(self, name: str, replicas: int) -> None:
        self.live[name]["status"] = {"readyReplicas": replicas}

    def deployments(self) -> list[dict[str, Any]]:
        return [c for c in self.applied if c["kind"] == "Deployment"]


def one_deployment(replicas: int, ready: int) -> dict[str, Any]:
    return {"metadata": {"name": "chat-vllm", "ownerReferences": OURS}, "spec": {"replicas": replicas},
            "status": {"readyReplicas": ready}}


def body_with(status: dict[str, Any] | None = None, **inference: Any) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    body["spec"]["inference"].update(inference)
    if status is not None:
        body["status"] = status
    return body


def affinity_classes(deployment: dict[str, Any]) -> list[str]:
    terms = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return sorted({v for t in terms for e in t["matchExpressions"] for v in e["values"]})


def test_each_group_gets_its_own_deployment_on_its_class_alone() -> None:
    cluster = GroupCluster()
    result = reconcile(body_with(), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    h100, mi250 = cluster.deployments()
    assert (h100["metadata"]["name"], h100["spec"]["replicas"]) == ("chat-vllm-h100", 2)
    assert (mi250["metadata"]["name"], mi250["spec"]["replicas"]) == ("chat-vllm-mi250", 2)
    assert affinity_classes(h100) == ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-NVL", "NVIDIA-H100-PCIe"]
    assert "740c" in affinity_classes(mi250)
    assert not any("NVIDIA" in v for v in affinity_classes(mi250))
    container = mi250["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["amd.com/gpu"] == 1
    assert container["image"] == CONFIG.serving.image_for("amd")
    assert mi250["spec"]["selector"]["matchLabels"]["tide.dev/serving-group"] == "MI250"
    assert [(g["gpuClass"], g["replicas"]) for g in result.status["servingGroups"]] == [("H100", 2), ("MI250", 2)]
    assert result.status["inferencePool"]["gpuClass"] == "H100"
    assert "chat-vllm" not in cluster.live  # no single Deployment beside the groups


def test_the_split_as_applied_is_kept_while_it_still_places() -> None:
    cluster = GroupCluster()
    status = {"servingGroups": [{"gpuClass": "H100", "deployment": "chat-vllm-h100", "replicas": 1},
                                {"gpuClass": "MI250", "deployment": "chat-vllm-mi250", "replicas": 2}]}
    result = reconcile(body_with(status, replicas=3), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    assert [g["replicas"] for g in result.status["servingGroups"]] == [1, 2]


def test_switching_groups_on_migrates_the_one_deployment_without_dropping_what_serves() -> None:
    cluster = GroupCluster({"chat-vllm": one_deployment(4, 4)})
    result = reconcile(body_with(), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    assert cluster.scaled == [("chat-vllm", 3)]  # one GPU freed for a new pod, three still serve
    assert result.status["replicas"] == 4
    assert not cluster.deleted
    cluster.ready("chat-vllm", 3)
    cluster.ready("chat-vllm-h100", 2)
    reconcile(body_with(result.status), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    assert cluster.scaled[-1] == ("chat-vllm", 1)
    cluster.ready("chat-vllm-mi250", 2)
    result = reconcile(body_with(result.status), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    assert cluster.deleted == ["chat-vllm"]
    assert any(e.reason == "ServingRetired" for e in result.events)
    assert result.status["replicas"] == 4


def test_switching_groups_off_retires_each_group_once_the_one_deployment_serves() -> None:
    cluster = GroupCluster()
    on = reconcile(body_with(), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    cluster.ready("chat-vllm-h100", 2)
    cluster.ready("chat-vllm-mi250", 2)
    off = reconcile(body_with(on.status, servingGroups=[], gpuClasses=["H100", "H200"]), cluster, CONFIG,
                    adopt=lambda c: c)  # type: ignore[arg-type]
    assert cluster.live["chat-vllm"]["spec"]["replicas"] == 4
    # Three of four keep serving (one freed a GPU), the fastest class's first.
    assert [(g["gpuClass"], g["replicas"], g["retiring"]) for g in off.status["servingGroups"]] == [
        ("H100", 2, True), ("MI250", 1, True)]
    cluster.ready("chat-vllm", 4)
    done = reconcile(body_with(off.status, servingGroups=[], gpuClasses=["H100", "H200"]), cluster, CONFIG,
                     adopt=lambda c: c)  # type: ignore[arg-type]
    assert sorted(cluster.deleted) == ["chat-vllm-h100", "chat-vllm-mi250"]
    assert "servingGroups" not in done.status


def test_a_failed_retire_stays_listed_and_a_foreign_deployment_is_never_touched() -> None:
    cluster = GroupCluster({"chat-vllm": {**one_deployment(4, 0), "metadata": {"name": "chat-vllm"}}})
    reconcile(body_with(), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    assert cluster.scaled == []
    assert cluster.deleted == []
    cluster = GroupCluster()
    on = reconcile(body_with(), cluster, CONFIG, adopt=lambda c: c)  # type: ignore[arg-type]
    cluster.ready("chat-vllm-h100", 2)
    cluster.ready("chat-vllm-mi250", 2)
    cluster.fail_delete = True
    off = reconcile(body_with(on.status, servingGroups=[{"gpuClass": "H100"}]), cluster, CONFIG,
                    adopt=lambda c: c)  # type: ignore[arg-type]
    cluster.ready("chat-vllm-h100", 4)
    again = reconcile(body_with(off.status, servingGroups=[{"gpuClass": "H100"}]), cluster, CONFIG,
                      adopt=lambda c: c)  # type: ignore[arg-type]
    assert any(e.reason == "ServingRetireFailed" for e in again.events)
    assert [g["gpuClass"] for g in again.status["servingGroups"] if g.get("retiring")] == ["MI250"]
    cluster.fail_delete = False
    reconcile(body_with(again.status, servingGroups=[{"gpuClass": "H100"}]), cluster, CONFIG,
              adopt=lambda c: c)  # type: ignore[arg-type]
    assert cluster.deleted == ["chat-vllm-mi250"]


def test_bad_groups_are_refused_naming_the_field() -> None:
    cases = [
        ([{"gpuClass": "H100"}, {"gpuClass": "h100"}], {}, "spec.inference.servingGroups[1].gpuClass"),
        ([{"gpuClass": "TPU"}], {}, "spec.inference.servingGroups[0].gpuClass"),
        ([{"gpuClass": "MI250"}], {"gpuClasses": ["H100"]}, "spec.inference.servingGroups[0].gpuClass"),
        ([{"gpuClass": "H100", "minReplicas": 3, "maxReplicas": 1}], {}, "spec.inference.servingGroups[0].maxReplicas"),
        (GROUPS, {"image": "ghcr.io/tide-operator/vllm-tide:1"}, "spec.inference.image: one image cannot serve"),
        ([{"gpuClass": "H100", "costProfile": {"configMapRef": {"name": "mi250-costs", "key": "profile"}}}], {},
         "spec.inference.servingGroups[0].costProfile.configMapRef: ConfigMap team/mi250-costs not found"),
        ([{"gpuClass": "H100", "costProfile": {"points": [{"batchSize": 1, "draftCostPermille": 100,
                                                            "verifyCostPercent": 100}] * 2}}], {},
         "spec.inference.servingGroups[0].costProfile.points: batchSize values must be unique"),
    ]
    for groups, extra, field in cases:  # the image is an allowed one: the refusal is the vendors'
        cluster = GroupCluster()
        result = reconcile(body_with(servingGroups=groups, **extra), cluster, CONFIG,
                           adopt=lambda c: c)  # type: ignore[arg-type]
        ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
        assert ready["message"].startswith(field), (groups, ready["message"])
        assert cluster.applied == []


def test_the_fleet_example_parses_and_places_a_deployment_per_class() -> None:
    from pathlib import Path

    import yaml

    from tide_operator.api import parse_spec
    from tide_operator.control.serving_groups import group_requests

    document = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "tidedeployment-fleet.yaml")
                              .read_text())
    spec = parse_spec(document["spec"], CONFIG.catalog.names())
    groups = group_requests(spec.inference.serving_groups, CONFIG.catalog, spec.inference.gpus_per_replica)
    assert [(g.gpu_class.name, g.min_replicas, g.max_replicas) for g in groups] == [("H100", 2, None),
                                                                                  ("MI250", 0, 4)]
    assert spec.inference.serving_groups[1].cost_profile.config_map_ref.name == "chat-mi250-costs"
