"""Pool choice: which GPU class serves and which trains, from the nodes the cluster has.

New GPUs serve and old GPUs train (TIDE §V-F): the inference pool takes the fastest inference class
with room for every replica (a replica must fit on one node); the training pool takes the best
training throughput per unit of inference throughput given up, on another class when one has room.
Pure: the caller lists the nodes (a Node informer or a test table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tide_operator.api.conditions import Reason
from tide_operator.catalog import GpuCatalog, GpuClass


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
    """The class chosen for one pool (None when nothing fits), the capacity found and why."""

    gpu_class: GpuClass | None
    reason: str
    message: str
    nodes: tuple[str, ...] = ()
    """Nodes of the class with room for at least one unit (replica or Job)."""
    units_fit: int = 0
    free_gpus: int = 0

    @property
    def ok(self) -> bool:
        return self.gpu_class is not None


@dataclass(frozen=True)
class Placement:
    inference: PoolChoice
    training: PoolChoice


@dataclass(frozen=True)
class PoolRequest:
    allowed: tuple[str, ...] | None
    """GPU classes the spec allows (None: the whole catalog)."""
    units: int
    gpus_per_unit: int


def _free_by_class(nodes: Sequence[NodeInventory], catalog: GpuCatalog) -> dict[str, dict[str, int]]:
    """{class name: {node name: free GPUs}} over schedulable nodes that carry a class's labels."""
    pools: dict[str, dict[str, int]] = {}
    for node in nodes:
        gpu_class = catalog.class_of(node.labels) if node.schedulable else None
        if gpu_class is not None:
            pools.setdefault(gpu_class.name, {})[node.name] = node.free(gpu_class.resource_name)
    return pools


def _capacity(
    gpu_class: GpuClass, free: Mapping[str, int], gpus_per_unit: int, reason: str, message: str
) -> PoolChoice:
    fitting = tuple(sorted(name for name, gpus in free.items() if gpus >= gpus_per_unit))
    return PoolChoice(
        gpu_class=gpu_class,
        reason=reason,
        message=message,
        nodes=fitting,
        units_fit=sum(gpus // gpus_per_unit for gpus in free.values()),
        free_gpus=sum(free.values()),
    )


def _candidates(catalog: GpuCatalog, allowed: tuple[str, ...] | None) -> list[GpuClass]:
    return [gpu_class for gpu_class in catalog.gpu_classes if allowed is None or gpu_class.name in allowed]


def _nothing_fits(
    present: list[GpuClass],
    candidates: list[GpuClass],
    pools: Mapping[str, Mapping[str, int]],
    request: PoolRequest,
) -> PoolChoice:
    if not present:
        names = ", ".join(gpu_class.name for gpu_class in candidates) or "none"
        return PoolChoice(None, Reason.NO_MATCHING_GPU_NODES, f"no schedulable node of GPU class {names}")
    found = "; ".join(
        f"{gpu_class.name}: " + ", ".join(f"{node}={gpus}" for node, gpus in sorted(pools[gpu_class.name].items()))
        for gpu_class in present
    )
    return PoolChoice(
        None,
        Reason.INSUFFICIENT_GPUS,
        f"need {request.units} x {request.gpus_per_unit} GPUs on single nodes; free GPUs: {found}",
    )


def choose_inference_pool(
    pools: Mapping[str, Mapping[str, int]],
    catalog: GpuCatalog,
    request: PoolRequest,
    current: str | None = None,
) -> PoolChoice:
    """Fastest inference class with room for every replica; the current class while it still fits."""
    candidates = _candidates(catalog, request.allowed)
    present = [gpu_class for gpu_class in candidates if gpu_class.name in pools]
    fitting = [
        gpu_class
        for gpu_class in present
        if sum(gpus // request.gpus_per_unit for gpus in pools[gpu_class.name].values()) >= request.units
    ]
    if not fitting:
        return _nothing_fits(present, candidates, pools, request)
    kept = [gpu_class for gpu_class in fitting if gpu_class.name == current]
    # max() keeps the first of equals, so ties go to catalog order.
    chosen = kept[0] if kept else max(fitting, key=lambda gpu_class: gpu_class.inference_throughput)
    why = "current class still fits" if kept else "fastest inference class with room"
    return _capacity(
        chosen,
        pools[chosen.name],
        request.gpus_per_unit,
        Reason.POOLS_CHOSEN,
        f"{chosen.name}: {why} for {request.units} x {request.gpus_per_unit} GPUs",
    )


def _after_inference(
    pools: Mapping[str, Mapping[str, int]], inference: PoolChoice, request: PoolRequest
) -> dict[str, dict[str, int]]:
    """Free GPUs once the replicas are placed, spread like the default scheduler (most free first)."""
    left = {name: dict(free) for name, free in pools.items()}
    if inference.gpu_class is None:
        return left
    free = left[inference.gpu_class.name]
    for _ in range(request.units):
        node = max(sorted(free), key=lambda name: free[name])
        free[node] -= request.gpus_per_unit
    return left


def choose_training_pool(
    pools: Mapping[str, Mapping[str, int]],
    catalog: GpuCatalog,
    request: PoolRequest,
    inference_class: str | None,
) -> PoolChoice:
    """Best training value with room for one Job, another class than inference's when one fits."""
    candidates = _candidates(catalog, request.allowed)
    present = [gpu_class for gpu_class in candidates if gpu_class.name in pools]
    fitting = [gpu_class for gpu_class in present if max(pools[gpu_class.name].values()) >= request.gpus_per_unit]
    if not fitting:
        return _nothing_fits(present, candidates, pools, request)
    ranked = sorted(fitting, key=lambda gpu_class: -gpu_class.training_value)
    others = [gpu_class for gpu_class in ranked if gpu_class.name != inference_class]
    chosen = (others or ranked)[0]
    why = "best training value per inference value given up" if others else "shares the inference class (no other fits)"
    return _capacity(chosen, pools[chosen.name], request.gpus_per_unit, Reason.POOLS_CHOSEN, f"{chosen.name}: {why}")


def choose_pools(
    nodes: Sequence[NodeInventory],
    catalog: GpuCatalog,
    inference: PoolRequest,
    training: PoolRequest,
    current_inference_class: str | None = None,
) -> Placement:
    """Inference pool first, then the training pool from what the replicas leave free."""
    pools = _free_by_class(nodes, catalog)
    inference_choice = choose_inference_pool(pools, catalog, inference, current_inference_class)
    left = _after_inference(pools, inference_choice, inference)
    inference_name = inference_choice.gpu_class.name if inference_choice.gpu_class else None
    return Placement(inference_choice, choose_training_pool(left, catalog, training, inference_name))
