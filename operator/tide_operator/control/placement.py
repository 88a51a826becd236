"""Pool choice: which GPU class serves and which trains. Placement prefers, the scheduler decides.

New GPUs serve and old GPUs train (TIDE §V-F). A pool always gets a class while the spec allows
one, with free GPUs or without (an autoscaler adds nodes only for Pending pods): the pods require
any allowed class that shares the chosen class's vendor and GPU resource name (a pod requests one
resource name, so it can only run on that vendor) and prefer each class by its value to the pool.
Missing capacity is reported (``WaitingForCapacity``), never a reason to hold the pods back.
Pure: the caller lists the nodes (a Node informer or a test table).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tide_operator.api.conditions import Reason
from tide_operator.catalog import GpuCatalog, GpuClass
from tide_operator.control.serving_groups import GroupRequest, Split, split_replicas

MAX_WEIGHT = 100  # preferredDuringScheduling weights run 1..100


@dataclass(frozen=True)
class NodeInventory:
    """One node as placement sees it.

    ``requested`` counts GPUs held by pods of OTHER workloads: the caller leaves out this
    TideDeployment's own pods, so the choice does not move away from GPUs it already uses.
    """

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    requested: Mapping[str, int] = field(default_factory=dict)
    schedulable: bool = True

    def free(self, resource_name: str) -> int:
        return max(0, self.allocatable.get(resource_name, 0) - self.requested.get(resource_name, 0))


@dataclass(frozen=True)
class PoolChoice:
    """The class chosen for one pool (None only when the spec allows no class), its capacity and why."""

    gpu_class: GpuClass | None
    reason: str  # PoolsChosen (room now) | WaitingForCapacity | NoAllowedGPUClass
    message: str
    nodes: tuple[str, ...] = ()
    """Nodes of the eligible classes with room for at least one unit (replica or Job)."""
    units_fit: int = 0
    free_gpus: int = 0
    preferences: tuple[tuple[GpuClass, int], ...] = ()
    """Eligible classes (required node affinity) with their preference weights (1..100)."""
    free_by_node: tuple[tuple[str, int], ...] = ()
    """Free GPUs per node of the eligible classes (this deployment's own pods count as free)."""

    def fit_for(self, gpus_per_unit: int) -> int:
        """How many pods of ``gpus_per_unit`` GPUs fit on these nodes now."""
        return sum(gpus // gpus_per_unit for _, gpus in self.free_by_node)

    @property
    def ok(self) -> bool:
        return self.gpu_class is not None

    @property
    def has_capacity(self) -> bool:
        return self.reason == Reason.POOLS_CHOSEN

    @property
    def affinity(self) -> tuple[tuple[GpuClass, int], ...]:
        """What the pods require and prefer; a choice made by hand (tests) is its class alone."""
        if self.preferences or self.gpu_class is None:
            return self.preferences
        return ((self.gpu_class, MAX_WEIGHT),)


@dataclass(frozen=True)
class GroupPlacement:
    """One serving group (inference.servingGroups): its class alone, and its share of the replicas."""

    choice: PoolChoice
    replicas: int
    gpus_per_replica: int


@dataclass(frozen=True)
class Placement:
    inference: PoolChoice
    """The one serving class; with serving groups, the fastest group's (its cost profile, lending's check)."""
    training: PoolChoice
    groups: tuple[GroupPlacement, ...] = ()
    split: Split | None = None


@dataclass(frozen=True)
class PoolRequest:
    allowed: tuple[str, ...] | None
    """GPU classes the spec allows (None: the whole catalog)."""
    units: int
    gpus_per_unit: int


Pools = Mapping[str, Mapping[str, int]]  # {class name: {node name: free GPUs}}


def _free_by_class(nodes: Sequence[NodeInventory], catalog: GpuCatalog) -> dict[str, dict[str, int]]:
    """{class name: {node name: free GPUs}} over schedulable nodes that carry a class's labels."""
    pools: dict[str, dict[str, int]] = {}
    for node in nodes:
        gpu_class = catalog.class_of(node.labels) if node.schedulable else None
        if gpu_class is not None:
            pools.setdefault(gpu_class.name, {})[node.name] = node.free(gpu_class.resource_name)
    return pools


def _candidates(catalog: GpuCatalog, allowed: tuple[str, ...] | None) -> list[GpuClass]:
    return [gpu_class for gpu_class in catalog.gpu_classes if allowed is None or gpu_class.name in allowed]


def same_device(candidates: Sequence[GpuClass], chosen: GpuClass) -> list[GpuClass]:
    """The candidates a pod that requests ``chosen``'s GPUs can run on (its vendor and resource name)."""
    return [c for c in candidates if (c.vendor, c.resource_name) == (chosen.vendor, chosen.resource_name)]


def preference_weights(classes: Sequence[GpuClass],
                       value: Callable[[GpuClass], float]) -> tuple[tuple[GpuClass, int], ...]:
    """Each class with a weight in 1..100 proportional to ``value`` (the best class gets 100)."""
    best = max((value(c) for c in classes), default=0.0)
    return tuple((c, max(1, min(MAX_WEIGHT, round(MAX_WEIGHT * value(c) / best)))) for c in classes)


def _free(pools: Pools, classes: Sequence[GpuClass]) -> dict[str, int]:
    return {node: gpus for c in classes for node, gpus in pools.get(c.name, {}).items()}


def _units_fit(free: Mapping[str, int], gpus_per_unit: int) -> int:
    return sum(gpus // gpus_per_unit for gpus in free.values())


SHOWN_NODES = 8  # a condition message names the roomiest nodes, not a whole pool


def _describe_free(free: Mapping[str, int]) -> str:
    if not free:
        return "no schedulable node of these classes yet (an autoscaler may add one)"
    shown = sorted(sorted(free), key=lambda node: -free[node])[:SHOWN_NODES]
    more = f" and {len(free) - len(shown)} more nodes" if len(free) > len(shown) else ""
    return "free GPUs: " + ", ".join(f"{node}={free[node]}" for node in sorted(shown)) + more


def _choice(chosen: GpuClass, candidates: Sequence[GpuClass], pools: Pools, request: PoolRequest,
            value: Callable[[GpuClass], float], why: str, units_needed: int) -> PoolChoice:
    """``chosen`` with the capacity of every class it shares a device with: PoolsChosen when
    ``units_needed`` fit now, WaitingForCapacity (saying what is missing) otherwise."""
    eligible = same_device(candidates, chosen)
    free = _free(pools, eligible)
    fit = _units_fit(free, request.gpus_per_unit)
    names = ", ".join(c.name for c in eligible)
    if fit >= units_needed:
        reason, message = Reason.POOLS_CHOSEN, f"{chosen.name}: {why}"
    else:
        reason = Reason.WAITING_FOR_CAPACITY
        message = (f"{chosen.name}: {why}; waiting for capacity: need {units_needed} x {request.gpus_per_unit} "
                   f"GPUs on single nodes of {names}, room now for {fit} ({_describe_free(free)})")
    return PoolChoice(chosen, reason, message,
                      nodes=tuple(sorted(n for n, gpus in free.items() if gpus >= request.gpus_per_unit)),
                      units_fit=fit, free_gpus=sum(free.values()),
                      preferences=preference_weights(eligible, value), free_by_node=tuple(sorted(free.items())))


def _no_class(request: PoolRequest) -> PoolChoice:
    allowed = ", ".join(request.allowed or ()) or "none"
    return PoolChoice(None, Reason.NO_ALLOWED_GPU_CLASS, f"no GPU class of the catalog is allowed (allowed: {allowed})")


def _inference_value(gpu_class: GpuClass) -> float:
    return gpu_class.inference_throughput


def _training_value(gpu_class: GpuClass) -> float:
    return gpu_class.training_value


def choose_inference_pool(pools: Pools, catalog: GpuCatalog, request: PoolRequest,
                          current: str | None = None, placed: int = 0) -> PoolChoice:
    """The current class while allowed (its pods stay put) unless only another device has room;
    otherwise a class with room now, then one with nodes, then the fastest (catalog order on ties).

    ``placed``: the current class's serving pods already bound to a node. While every replica is
    placed the class stays whatever the nodes look like now: a node whose heartbeat is late is
    NotReady (not schedulable) for a moment, and moving the whole fleet to another device for it
    would restart every pod. A class change is for replicas that cannot be placed.
    """
    candidates = _candidates(catalog, request.allowed)
    if not candidates:
        return _no_class(request)

    def fits(classes: Sequence[GpuClass]) -> bool:
        return _units_fit(_free(pools, classes), request.gpus_per_unit) >= request.units

    kept = next((c for c in candidates if c.name == current), None)
    if kept is not None and placed >= request.units:
        return _choice(kept, candidates, pools, request, _inference_value,
                       f"current class, its {placed} replica(s) placed", 0)
    if kept is not None and (fits(same_device(candidates, kept))
                             or not any(fits(same_device(candidates, c)) for c in candidates)):
        return _choice(kept, candidates, pools, request, _inference_value, "current class", request.units)
    # max() keeps the first of equals, so ties go to catalog order.
    chosen = max(candidates, key=lambda c: (fits([c]), fits(same_device(candidates, c)), c.name in pools,
                                            c.inference_throughput))
    why = "fastest inference class with room" if fits([chosen]) else "fastest inference class"
    return _choice(chosen, candidates, pools, request, _inference_value, why, request.units)


def _after_inference(pools: Pools, inference: PoolChoice, request: PoolRequest) -> dict[str, dict[str, int]]:
    """Free GPUs once the replicas are placed: each on the preferred class's node with most room."""
    left = {name: dict(free) for name, free in pools.items()}
    slots = [(weight, c.name, node) for c, weight in inference.affinity for node in left.get(c.name, {})]
    for _ in range(request.units):
        open_slots = [s for s in slots if left[s[1]][s[2]] >= request.gpus_per_unit]
        if not open_slots:
            break
        _, class_name, node = max(sorted(open_slots, key=lambda s: s[2]), key=lambda s: (s[0], left[s[1]][s[2]]))
        left[class_name][node] -= request.gpus_per_unit
    return left


def choose_training_pool(pools: Pools, catalog: GpuCatalog, request: PoolRequest,
                         inference_class: str | None) -> PoolChoice:
    """Best training value with room for one Job, another class than inference's when one has room;
    without room, still a class: one the cluster has, then the best value (the Job waits Pending)."""
    candidates = _candidates(catalog, request.allowed)
    if not candidates:
        return _no_class(request)

    def fits(classes: Sequence[GpuClass]) -> bool:
        return max(_free(pools, classes).values(), default=0) >= request.gpus_per_unit

    # A class the cluster has ranks above an absent one, which only an autoscaler could add.
    chosen = max(candidates, key=lambda c: (fits([c]), fits(same_device(candidates, c)), c.name in pools,
                                            c.name != inference_class, c.training_value))
    if not fits([chosen]):
        why = "best training value"
    elif chosen.name == inference_class:
        why = "shares the inference class (no other has room)"
    else:
        why = "best training value per inference value given up"
    return _choice(chosen, candidates, pools, request, _training_value, why, 1)


def choose_pools(
    nodes: Sequence[NodeInventory],
    catalog: GpuCatalog,
    inference: PoolRequest,
    training: PoolRequest,
    current_inference_class: str | None = None,
    placed: int = 0,
) -> Placement:
    """Inference pool first, then the training pool from what the replicas leave free."""
    pools = _free_by_class(nodes, catalog)
    inference_choice = choose_inference_pool(pools, catalog, inference, current_inference_class, placed)
    left = _after_inference(pools, inference_choice, inference)
    inference_name = inference_choice.gpu_class.name if inference_choice.gpu_class else None
    return Placement(inference_choice, choose_training_pool(left, catalog, training, inference_name))


def choose_group_pools(
    nodes: Sequence[NodeInventory],
    catalog: GpuCatalog,
    groups: Sequence[GroupRequest],
    total: int,
    training: PoolRequest,
    current: Mapping[str, int],
) -> Placement:
    """Serving groups: the split of ``total`` (serving_groups.py), each group's class alone with its
    capacity, then the training pool from what every group leaves free."""
    pools = _free_by_class(nodes, catalog)
    fit = {g.gpu_class.name: _units_fit(_free(pools, [g.gpu_class]), g.gpus_per_replica) for g in groups}
    split = split_replicas(total, groups, fit, current)
    placed, left = [], pools
    for g in groups:
        request = PoolRequest((g.gpu_class.name,), split.of(g.gpu_class.name), g.gpus_per_replica)
        choice = _choice(g.gpu_class, [g.gpu_class], left, request, _inference_value, "serving group",
                         request.units)
        placed.append(GroupPlacement(choice, request.units, g.gpus_per_replica))
        left = _after_inference(left, choice, request)
    primary = _primary(placed)
    training_choice = choose_training_pool(left, catalog, training, primary.gpu_class.name if primary.gpu_class
                                           else None)
    return Placement(primary, training_choice, tuple(placed), split)


def _primary(placed: Sequence[GroupPlacement]) -> PoolChoice:
    """The fastest group that runs replicas (else the fastest): WaitingForCapacity while any group waits."""
    running = [p for p in placed if p.replicas > 0] or list(placed)
    best = max(running, key=lambda p: p.choice.gpu_class.inference_throughput * p.gpus_per_replica
               if p.choice.gpu_class else 0.0)
    waiting = [p for p in placed if not p.choice.has_capacity]
    message = "serving groups: " + "; ".join(f"{p.replicas} on {p.choice.message}" for p in placed)
    return replace(best.choice, reason=Reason.WAITING_FOR_CAPACITY if waiting else Reason.POOLS_CHOSEN,
                   message=message)
