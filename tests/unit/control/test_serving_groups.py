"""The total replicas split across serving groups, and what a retiring Deployment keeps (pure)."""

from __future__ import annotations

import pytest

from tide_operator.api.spec_workload import ServingGroup
from tide_operator.config import OperatorConfig
from tide_operator.control.placement import NodeInventory, PoolRequest, choose_group_pools
from tide_operator.control.serving_groups import (
    GroupRequest,
    group_requests,
    retiring_replicas,
    split_replicas,
    vendor_problem,
)

CATALOG = OperatorConfig().catalog
CLASS = {c.name: c for c in CATALOG.gpu_classes}
H100, MI250 = GroupRequest(CLASS["H100"], 1), GroupRequest(CLASS["MI250"], 1)
ROOMY = {"H100": 8, "MI250": 8}


def shares(total: int, groups: list[GroupRequest], fit: dict[str, int] | None = None,
           current: dict[str, int] | None = None) -> dict[str, int]:
    return dict(split_replicas(total, groups, ROOMY if fit is None else fit, current or {}).replicas)


def test_a_fresh_split_fills_the_fastest_class_with_room_first() -> None:
    assert shares(5, [MI250, H100]) == {"MI250": 0, "H100": 5}
    assert shares(5, [MI250, H100], fit={"H100": 3, "MI250": 8}) == {"MI250": 2, "H100": 3}


def test_without_room_anywhere_the_replicas_wait_on_the_fastest_class() -> None:
    """An autoscaler adds nodes only for Pending pods: they are asked for where they serve most."""
    assert shares(3, [MI250, H100], fit={}) == {"MI250": 0, "H100": 3}


def test_minimums_and_maximums_bound_each_class() -> None:
    groups = [GroupRequest(CLASS["H100"], 1, max_replicas=2), GroupRequest(CLASS["MI250"], 1, min_replicas=1)]
    assert shares(5, groups) == {"H100": 2, "MI250": 3}
    split = split_replicas(5, [GroupRequest(CLASS["H100"], 1, max_replicas=2),
                               GroupRequest(CLASS["MI250"], 1, max_replicas=1)], ROOMY, {})
    assert (dict(split.replicas), split.unplaced) == ({"H100": 2, "MI250": 1}, 2)
    assert "2 replica(s) beyond every group's maxReplicas not run" in split.message


def test_a_total_below_the_minimums_meets_them_fastest_first() -> None:
    groups = [GroupRequest(CLASS["MI250"], 1, min_replicas=2), GroupRequest(CLASS["H100"], 1, min_replicas=2)]
    assert shares(3, groups) == {"MI250": 1, "H100": 2}
    assert shares(3, groups, current={"MI250": 2, "H100": 2}) == {"MI250": 1, "H100": 2}


def test_what_runs_stays_put_and_a_scale_down_takes_the_slowest_class_first() -> None:
    """H100 has room again, but the MI250 replicas serve: no pod restarts to move them."""
    assert shares(4, [H100, MI250], current={"H100": 2, "MI250": 2}) == {"H100": 2, "MI250": 2}
    assert shares(3, [H100, MI250], current={"H100": 2, "MI250": 2}) == {"H100": 2, "MI250": 1}
    assert shares(5, [H100, MI250], current={"H100": 2, "MI250": 2}) == {"H100": 3, "MI250": 2}


def test_replicas_a_class_cannot_place_move_to_a_class_with_room() -> None:
    assert shares(4, [H100, MI250], fit={"H100": 2, "MI250": 8}, current={"H100": 4}) == {"H100": 2, "MI250": 2}
    # No room anywhere else: they wait where they are.
    assert shares(4, [H100, MI250], fit={"H100": 2, "MI250": 0}, current={"H100": 4}) == {"H100": 4, "MI250": 0}


def test_the_value_of_a_replica_counts_its_gpus() -> None:
    """A replica of eight MI250s (8.0) serves more than one of a single H100 (6.76)."""
    big = GroupRequest(CLASS["MI250"], 8)
    assert shares(1, [H100, big]) == {"H100": 0, "MI250": 1}


@pytest.mark.parametrize(("total", "ready", "now", "keep"), [
    (4, 0, 4, 3),  # one leaves at once: a full pool frees a GPU for a new pod
    (4, 1, 3, 2),
    (4, 3, 1, 1),  # the last stays until every replica is ready where it stays
    (4, 4, 1, 0),
    (1, 0, 1, 1),  # a single replica is never dropped before its successor serves
    (4, 0, 2, 2),  # never more than it has
    (0, 0, 3, 0),
])
def test_a_retiring_deployment_keeps_replicas_until_the_others_serve(total: int, ready: int, now: int,
                                                                     keep: int) -> None:
    assert retiring_replicas(total, ready, now) == keep


def test_one_image_cannot_serve_two_vendors() -> None:
    assert vendor_problem([H100, MI250], "registry.example/vllm:1") is not None
    assert vendor_problem([H100, MI250], None) is None
    assert vendor_problem([H100, GroupRequest(CLASS["H200"], 1)], "registry.example/vllm:1") is None


def test_group_requests_take_each_groups_gpus_or_the_inference_default() -> None:
    groups = group_requests([ServingGroup.model_validate({"gpuClass": "H100", "minReplicas": 1, "maxReplicas": 4}),
                             ServingGroup.model_validate({"gpuClass": "MI250", "gpusPerReplica": 4})], CATALOG, 2)
    assert [(g.gpu_class.name, g.gpus_per_replica, g.min_replicas, g.max_replicas) for g in groups] == [
        ("H100", 2, 1, 4), ("MI250", 4, 0, None)]


def test_group_placement_requires_each_class_alone_and_trains_on_what_is_left() -> None:
    nodes = [NodeInventory("h100-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 2}),
             NodeInventory("mi250-0", {"amd.com/gpu.device-id": "740c"}, {"amd.com/gpu": 4})]
    placement = choose_group_pools(nodes, CATALOG, [H100, MI250], 4, PoolRequest(None, 1, 1), {})
    assert [(g.choice.gpu_class.name, g.replicas) for g in placement.groups] == [("H100", 2), ("MI250", 2)]
    assert [c.name for c, _ in placement.groups[1].choice.affinity] == ["MI250"]
    assert placement.inference.gpu_class.name == "H100"
    assert placement.inference.has_capacity
    assert placement.training.gpu_class.name == "MI250"  # two MI250s left free
    full = choose_group_pools(nodes, CATALOG, [H100, GroupRequest(CLASS["MI250"], 1, max_replicas=1)], 4,
                              PoolRequest(None, 1, 1), {})
    assert [g.replicas for g in full.groups] == [3, 1]
    assert not full.inference.has_capacity  # the third H100 replica waits for a node


def test_class_tables_follow_each_classs_profile_at_the_fleet_tables_acceptance() -> None:
    from dataclasses import dataclass

    from tide_operator.control.cost_model import CostProfile, tokens_per_batch_size_table
    from tide_operator.control.serving_groups import ClassTables

    @dataclass
    class Pod:
        name: str
        gpu_class: str | None

    dear = CostProfile.from_spec_points([(1, 400, 110), (64, 300, 180)])
    tables = ClassTables({"MI250": dear}, 3, 1.02)
    fleet = ((1, 8, 3), (9, 64, 2))
    own = tuple(tuple(r) for r in tokens_per_batch_size_table(0.6, 3, 64, dear, 1.02))
    assert tables.for_class("MI250", fleet, 0.6) == own
    assert tables.for_class("H100", fleet, 0.6) == fleet  # no profile of its own: the fleet's
    assert tables.for_class("MI250", None, 0.6) is None  # the launch table (no adaptive tokens)
    assert tables.for_class("MI250", fleet, None) == fleet  # a probe's table: made for no acceptance
    pods = [Pod("a", "H100"), Pod("b", "MI250"), Pod("c", None)]
    assert tables.by_table(pods, fleet, 0.6) == [(fleet, [pods[0], pods[2]]), (own, [pods[1]])]
    assert ClassTables({}, 3, 1.02).by_table(pods, fleet, 0.6) == [(fleet, None)]
