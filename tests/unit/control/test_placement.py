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


def choose(nodes, replicas=2, gpus=4, job_gpus=4, inference=None, training=None, current=None, placed=0):
    return choose_pools(
        nodes,
        DEFAULT_CATALOG,
        PoolRequest(inference, replicas, gpus),
        PoolRequest(training, 1, job_gpus),
        current,
        placed,
    )


W, P = "WaitingForCapacity", "PoolsChosen"
# (case, nodes, request kwargs, (inference class, reason), (training class, reason))
CASES = [
    ("new GPUs serve, old train", [h100("h1"), h100("h2"), mi250("m1"), CPU], {}, ("H100", P), ("MI250", P)),
    ("only H100: training shares it", [h100("h1"), h100("h2")], {}, ("H100", P), ("H100", P)),
    ("fastest inference wins", [h100("h1"), h200("h2"), mi250("m1")], {"replicas": 1}, ("H200", P), ("MI250", P)),
    (
        "H200 too small falls back to H100",
        [h200("h2", gpus=4), h100("h1"), h100("h3"), mi250("m1")],
        {},
        ("H100", P),
        ("MI250", P),
    ),
    (
        "preference restricts inference",
        [h100("h1"), a100("a1"), mi250("m1")],
        {"replicas": 1, "inference": ("A100",)},
        ("A100", P),
        ("MI250", P),
    ),
    (
        "preference restricts training",
        [h100("h1"), a100("a1"), mi250("m1")],
        {"replicas": 1, "training": ("A100",)},
        ("H100", P),
        ("A100", P),
    ),
    ("MI300X serves, MI250 trains", [mi300x("x1"), mi250("m1")], {"replicas": 1}, ("MI300X", P), ("MI250", P)),
    (
        "training elsewhere when the inference class is full",
        [h100("h1", gpus=8), mi300x("x1")],
        {},
        ("H100", P),
        ("MI300X", P),
    ),
    (
        "busy GPUs do not count",
        [h100("h1", used=8), h100("h2", used=6), mi300x("x1"), mi250("m1")],
        {"replicas": 1},
        ("MI300X", P),
        ("MI250", P),
    ),
    ("scale to zero still picks a class", [h100("h1", used=8), mi250("m1")], {"replicas": 0}, ("H100", P),
     ("MI250", P)),
    # Placement prefers, the scheduler decides: without room a class is still chosen and the pods wait.
    (
        "no room after inference: training waits on a class the cluster has",
        [h100("h1"), h100("h2")],
        {"replicas": 4},
        ("H100", P),
        ("H100", W),
    ),
    ("no GPU node at all: the fastest class of the catalog", [CPU], {}, ("H200", W), ("MI250", W)),
    ("a pool autoscaled to zero: the allowed class", [CPU, mi250("m1")], {"inference": ("H100",)}, ("H100", W),
     ("MI250", P)),
    ("too few GPUs: a class with nodes before one without", [h100("h1", used=6), mi250("m1", gpus=4)],
     {"replicas": 3, "inference": ("H200", "H100")}, ("H100", W), ("MI250", P)),
    (
        "the class with room beats a faster one without",
        [h200("h2", used=8), a100("a1"), mi250("m1")],
        {"replicas": 1},
        ("A100", P),
        ("MI250", P),
    ),
]


@pytest.mark.parametrize(
    ("nodes", "kwargs", "inference", "training"),
    [pytest.param(n, k, i, t, id=case) for case, n, k, i, t in CASES],
)
def test_pool_choice(nodes, kwargs, inference, training) -> None:
    placement = choose(nodes, **kwargs)
    assert (placement.inference.gpu_class.name, placement.inference.reason) == inference
    assert (placement.training.gpu_class.name, placement.training.reason) == training


def test_capacity_is_reported() -> None:
    placement = choose([h100("h1"), h100("h2", used=4), mi250("m1", gpus=4), CPU])
    assert placement.inference.nodes == ("h1", "h2")
    assert placement.inference.units_fit == 3  # 8/4 + 4/4
    assert placement.inference.free_gpus == 12
    assert placement.inference.reason == Reason.POOLS_CHOSEN
    assert placement.inference.has_capacity
    assert placement.training.nodes == ("m1",)
    assert placement.training.free_gpus == 4
    assert "training value" in placement.training.message


def test_shared_class_is_explained() -> None:
    placement = choose([h100("h1"), h100("h2")])
    assert placement.training.gpu_class.name == "H100"
    assert "shares the inference class" in placement.training.message


def test_eligible_classes_share_the_vendor_and_resource_weighted_by_pool_value() -> None:
    placement = choose([h100("h1"), mi250("m1")])
    inference = {c.name: w for c, w in placement.inference.preferences}
    # Every NVIDIA class of the catalog (a pod requesting nvidia.com/gpu runs on no AMD node).
    assert inference == {"H200": 100, "H100": 71, "A100": 28, "L40S": 21}  # inference throughput / 9.5
    training = {c.name: w for c, w in placement.training.preferences}
    assert training == {"MI300X": 40, "MI250": 100}  # training value: 1.77/4.42 vs 1.0/1.0


def test_eligible_classes_stay_within_what_the_spec_allows() -> None:
    placement = choose([h100("h1"), a100("a1"), mi250("m1")], replicas=1, inference=("A100", "H100", "MI250"))
    assert [(c.name, w) for c, w in placement.inference.preferences] == [("H100", 100), ("A100", 40)]


def test_weights_stay_between_1_and_100() -> None:
    from tide_operator.control.placement import preference_weights

    classes = [DEFAULT_CATALOG.get("H200"), DEFAULT_CATALOG.get("MI250")]
    assert [w for _, w in preference_weights(classes, lambda c: c.inference_throughput)] == [100, 11]
    assert [w for _, w in preference_weights(classes, lambda c: 1e-9 if c.name == "MI250" else 1.0)] == [100, 1]


def test_capacity_counts_every_eligible_class() -> None:
    # The pods may land on the A100 node too (same vendor and resource): room for both replicas.
    placement = choose([h100("h1", used=4), a100("a1", used=4)], replicas=2, gpus=4, current="H100")
    assert placement.inference.gpu_class.name == "H100"
    assert placement.inference.reason == Reason.POOLS_CHOSEN
    assert placement.inference.nodes == ("a1", "h1")


def test_no_gpu_nodes_waits_for_capacity_and_says_what_is_missing() -> None:
    placement = choose([CPU], replicas=2, gpus=4)
    assert placement.inference.ok
    assert not placement.inference.has_capacity
    message = placement.inference.message
    assert "need 2 x 4 GPUs on single nodes of H200, H100, A100, L40S" in message
    assert "room now for 0" in message
    assert "no schedulable node" in message
    assert placement.training.reason == Reason.WAITING_FOR_CAPACITY


def test_not_enough_gpus_names_the_free_gpus() -> None:
    placement = choose([h100("h1", gpus=8, used=6), h100("h2", gpus=8, used=2)], replicas=3)
    assert placement.inference.reason == Reason.WAITING_FOR_CAPACITY
    assert "need 3 x 4 GPUs" in placement.inference.message
    assert "room now for 1" in placement.inference.message
    assert "free GPUs: h1=2, h2=6" in placement.inference.message


def test_a_replica_must_fit_on_one_node() -> None:
    # 4 + 4 free GPUs in total, but no node holds 8.
    placement = choose([h100("h1", used=4), h100("h2", used=4)], replicas=1, gpus=8)
    assert placement.inference.reason == Reason.WAITING_FOR_CAPACITY
    assert placement.inference.units_fit == 0


def test_a_large_pool_is_summarised() -> None:
    nodes = [h100(f"h{i:02d}", used=8) for i in range(20)] + [h100("free", used=4)]
    message = choose(nodes, replicas=2, gpus=8).inference.message
    assert "free=4" in message
    assert "and 13 more nodes" in message


def test_no_allowed_class_is_the_only_placement_error() -> None:
    placement = choose([h100("h1")], inference=())
    assert not placement.inference.ok
    assert placement.inference.reason == Reason.NO_ALLOWED_GPU_CLASS


def test_unschedulable_nodes_are_ignored() -> None:
    cordoned = NodeInventory("h1", h100("h1").labels, {NV: 8}, schedulable=False)
    placement = choose([cordoned, mi250("m1")], replicas=1)
    assert placement.inference.gpu_class.name == "MI250"


def test_current_class_is_kept_while_it_is_allowed() -> None:
    nodes = [h100("h1"), h200("h2"), mi250("m1")]
    assert choose(nodes, replicas=1).inference.gpu_class.name == "H200"
    assert choose(nodes, replicas=1, current="H100").inference.gpu_class.name == "H100"
    # H100 full: the class stays (no pod restarts); its pods may use the H200 node of the same vendor.
    full = choose([h100("h1", used=8), h200("h2"), mi250("m1")], replicas=1, current="H100").inference
    assert (full.gpu_class.name, full.reason) == ("H100", Reason.POOLS_CHOSEN)
    # No room on the vendor, none elsewhere either: kept, waiting (an autoscaler may add nodes).
    waiting = choose([h100("h1", used=8), mi250("m1", used=8)], replicas=1, current="H100").inference
    assert (waiting.gpu_class.name, waiting.reason) == ("H100", Reason.WAITING_FOR_CAPACITY)
    # A class the spec no longer allows is left.
    assert choose(nodes, replicas=1, current="H100", inference=("H200",)).inference.gpu_class.name == "H200"


def test_current_class_moves_only_when_another_vendor_has_room_and_its_own_has_none() -> None:
    placement = choose([h100("h1", used=8), mi250("m1")], replicas=1, current="H100")
    assert (placement.inference.gpu_class.name, placement.inference.reason) == ("MI250", Reason.POOLS_CHOSEN)


def test_placed_replicas_keep_their_class_while_their_nodes_are_not_ready() -> None:
    # The H100 nodes' heartbeats are late (NotReady: not schedulable) while the MI250 node has room.
    late = [NodeInventory(n, h100(n).labels, {NV: 8}, schedulable=False) for n in ("h1", "h2")]
    kept = choose([*late, mi250("m1")], replicas=2, gpus=1, current="H100", placed=2).inference
    assert (kept.gpu_class.name, kept.reason) == ("H100", Reason.POOLS_CHOSEN)
    assert "2 replica(s) placed" in kept.message
    # One replica cannot be placed (the other is Pending): moving is allowed again.
    moved = choose([*late, mi250("m1")], replicas=2, gpus=1, current="H100", placed=1).inference
    assert moved.gpu_class.name == "MI250"
    # A class the spec no longer allows is left even with every replica placed.
    left = choose([h100("h1"), h200("h2")], replicas=1, current="H100", placed=1, inference=("H200",)).inference
    assert left.gpu_class.name == "H200"


def test_inference_replicas_leave_room_for_training_on_the_same_class() -> None:
    # Two 4-GPU replicas spread over two 8-GPU nodes leave 4 free on each: a 4-GPU job fits, 8 does not.
    assert choose([h100("h1"), h100("h2")], job_gpus=4).training.has_capacity
    short = choose([h100("h1"), h100("h2")], job_gpus=8).training
    assert (short.gpu_class.name, short.reason) == ("H100", Reason.WAITING_FOR_CAPACITY)


def test_replicas_go_to_the_preferred_class_before_training_counts_what_is_left() -> None:
    # One replica: the scheduler prefers H200 (weight 100) over H100, so the H100 node stays free to train.
    placement = choose([h100("h1", gpus=4), h200("h2", gpus=4)], replicas=1, gpus=4, job_gpus=4,
                       training=("H100", "H200"))
    assert placement.inference.gpu_class.name == "H200"
    assert (placement.training.gpu_class.name, placement.training.nodes) == ("H100", ("h1",))
