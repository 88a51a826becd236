from __future__ import annotations

import pytest

from tide_operator.api.conditions import Reason
from tide_operator.catalog import DEFAULT_CATALOG
from tide_operator.control.placement import NodeInventory, PoolRequest, choose_pools

NV = "nvidia.com/gpu"
AMD = "amd.com/gpu"


def h100(name: str, gpus: int = 8, used: int = 0) -> NodeInventory:
    return NodeInventory(name, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {NV: gpus}, {NV: used})


def h200(name: str, gpus: int = 8, used: int = 0) -> NodeInventory:
    return NodeInventory(name, {"nvidia.com/gpu.product": "NVIDIA-H200"}, {NV: gpus}, {NV: used})


def a100(name: str, gpus: int = 8, used: int = 0) -> NodeInventory:
    return NodeInventory(name, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, {NV: gpus}, {NV: used})


def mi250(name: str, gpus: int = 8, used: int = 0) -> NodeInventory:
    return NodeInventory(name, {"amd.com/gpu.device-id": "740c"}, {AMD: gpus}, {AMD: used})


def mi300x(name: str, gpus: int = 8, used: int = 0) -> NodeInventory:
    return NodeInventory(name, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, {AMD: gpus}, {AMD: used})


CPU = NodeInventory("cpu-1", {"kubernetes.io/os": "linux"}, {"cpu": 64})


def choose(nodes, replicas=2, gpus=4, job_gpus=4, inference=None, training=None, current=None):
    return choose_pools(
        nodes,
        DEFAULT_CATALOG,
        PoolRequest(inference, replicas, gpus),
        PoolRequest(training, 1, job_gpus),
        current,
    )


# (case, nodes, request kwargs, inference class, training class)
CASES = [
    ("new GPUs serve, old train", [h100("h1"), h100("h2"), mi250("m1"), CPU], {}, "H100", "MI250"),
    ("only H100: training shares it", [h100("h1"), h100("h2")], {}, "H100", "H100"),
    ("fastest inference wins", [h100("h1"), h200("h2"), mi250("m1")], {"replicas": 1}, "H200", "MI250"),
    (
        "H200 too small falls back to H100",
        [h200("h2", gpus=4), h100("h1"), h100("h3"), mi250("m1")],
        {},
        "H100",
        "MI250",
    ),
    (
        "preference restricts inference",
        [h100("h1"), a100("a1"), mi250("m1")],
        {"replicas": 1, "inference": ("A100",)},
        "A100",
        "MI250",
    ),
    (
        "preference restricts training",
        [h100("h1"), a100("a1"), mi250("m1")],
        {"replicas": 1, "training": ("A100",)},
        "H100",
        "A100",
    ),
    (
        "MI300X beats MI250 at training value? no: MI250",
        [mi300x("x1"), mi250("m1")],
        {"replicas": 1},
        "MI300X",
        "MI250",
    ),
    (
        "training elsewhere when the inference class is full",
        [h100("h1", gpus=8), mi300x("x1")],
        {},
        "H100",
        "MI300X",
    ),
    (
        "busy GPUs do not count",
        [h100("h1", used=8), h100("h2", used=6), mi300x("x1"), mi250("m1")],
        {"replicas": 1},
        "MI300X",
        "MI250",
    ),
    (
        "scale to zero still picks a class",
        [h100("h1", used=8), mi250("m1")],
        {"replicas": 0},
        "H100",
        "MI250",
    ),
    ("training fallback needs room after inference", [h100("h1"), h100("h2")], {"replicas": 4}, "H100", None),
]


@pytest.mark.parametrize(
    ("nodes", "kwargs", "inference", "training"),
    [pytest.param(n, k, i, t, id=case) for case, n, k, i, t in CASES],
)
def test_pool_choice(nodes, kwargs, inference, training) -> None:
    placement = choose(nodes, **kwargs)
    assert (placement.inference.gpu_class.name if placement.inference.ok else None) == inference
    assert (placement.training.gpu_class.name if placement.training.ok else None) == training


def test_capacity_is_reported() -> None:
    placement = choose([h100("h1"), h100("h2", used=4), mi250("m1", gpus=4), CPU])
    assert placement.inference.nodes == ("h1", "h2")
    assert placement.inference.units_fit == 3  # 8/4 + 4/4
    assert placement.inference.free_gpus == 12
    assert placement.inference.reason == Reason.POOLS_CHOSEN
    assert placement.training.nodes == ("m1",)
    assert placement.training.free_gpus == 4
    assert "training value" in placement.training.message


def test_shared_class_is_explained() -> None:
    placement = choose([h100("h1"), h100("h2")])
    assert placement.training.gpu_class.name == "H100"
    assert "shares the inference class" in placement.training.message


def test_no_gpu_nodes() -> None:
    placement = choose([CPU])
    assert not placement.inference.ok
    assert placement.inference.reason == Reason.NO_MATCHING_GPU_NODES
    assert placement.training.reason == Reason.NO_MATCHING_GPU_NODES


def test_preference_with_no_such_nodes() -> None:
    placement = choose([h100("h1"), mi250("m1")], inference=("H200",))
    assert placement.inference.reason == Reason.NO_MATCHING_GPU_NODES
    assert "H200" in placement.inference.message
    assert placement.training.gpu_class.name == "MI250"


def test_not_enough_gpus() -> None:
    placement = choose([h100("h1", gpus=8, used=6), h100("h2", gpus=8, used=2)], replicas=3)
    assert placement.inference.reason == Reason.INSUFFICIENT_GPUS
    assert "h1=2" in placement.inference.message
    assert "h2=6" in placement.inference.message


def test_a_replica_must_fit_on_one_node() -> None:
    # 4 + 4 free GPUs in total, but no node holds 8.
    placement = choose([h100("h1", used=4), h100("h2", used=4)], replicas=1, gpus=8)
    assert placement.inference.reason == Reason.INSUFFICIENT_GPUS


def test_unschedulable_nodes_are_ignored() -> None:
    cordoned = NodeInventory("h1", h100("h1").labels, {NV: 8}, schedulable=False)
    placement = choose([cordoned, mi250("m1")], replicas=1)
    assert placement.inference.gpu_class.name == "MI250"


def test_current_class_is_kept_while_it_fits() -> None:
    nodes = [h100("h1"), h200("h2"), mi250("m1")]
    assert choose(nodes, replicas=1).inference.gpu_class.name == "H200"
    assert choose(nodes, replicas=1, current="H100").inference.gpu_class.name == "H100"
    full = [h100("h1", used=8), h200("h2"), mi250("m1")]
    assert choose(full, replicas=1, current="H100").inference.gpu_class.name == "H200"


def test_inference_replicas_leave_room_for_training_on_the_same_class() -> None:
    # Two 4-GPU replicas spread over two 8-GPU nodes leave 4 free on each: a 4-GPU job fits, 8 does not.
    assert choose([h100("h1"), h100("h2")], job_gpus=4).training.ok
    assert not choose([h100("h1"), h100("h2")], job_gpus=8).training.ok
