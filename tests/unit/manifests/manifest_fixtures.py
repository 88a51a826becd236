"""Specs and placements shared by the builder tests."""

from __future__ import annotations

import copy
from typing import Any

from tide_operator.api import TideDeploymentSpec, parse_spec
from tide_operator.catalog import DEFAULT_CATALOG
from tide_operator.control.placement import NodeInventory, Placement, PoolRequest, choose_pools

BASE: dict[str, Any] = {
    "target": {
        "model": "s3://models/llama-3.3-70b",
        "revision": "5f1c0e2",
        "servedModelName": "chat",
        "tensorParallelSize": 4,
    },
    "draft": {"initial": "s3://drafts/llama/eagle3-base", "numSpeculativeTokens": 3},
    "inference": {"replicas": 2, "gpusPerReplica": 4},
    "training": {"gpusPerJob": 4},
    "storage": {
        "s3": {
            "bucket": "tide",
            "prefix": "llm/chat",
            "region": "us-east-1",
            "endpoint": "http://minio.storage:9000",
            "credentialsSecret": "s3-creds",
        }
    },
}


def spec_with(**sections: dict[str, Any]) -> TideDeploymentSpec:
    raw = copy.deepcopy(BASE)
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return parse_spec(raw)


def placement(inference: str = "H100", training: str = "MI250") -> Placement:
    labels = {
        "H100": ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "nvidia.com/gpu"),
        "MI300X": ({"amd.com/gpu.device-id": "74a1"}, "amd.com/gpu"),
        "MI250": ({"amd.com/gpu.device-id": "740c"}, "amd.com/gpu"),
        "A100": ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "nvidia.com/gpu"),
    }
    nodes = [
        NodeInventory(f"{name.lower()}-{i}", labels[name][0], {labels[name][1]: 8})
        for name in {inference, training}
        for i in range(2)
    ]
    chosen = choose_pools(nodes, DEFAULT_CATALOG, PoolRequest((inference,), 2, 4), PoolRequest((training,), 1, 4))
    assert chosen.inference.gpu_class.name == inference
    assert chosen.training.gpu_class.name == training
    return chosen


def env_map(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}
