"""Serving groups (inference.servingGroups): the total replicas split across GPU classes, and the
migration between one Deployment and a Deployment per class.

The split keeps what runs: a replica moves to another class only when its own cannot place it (its
Deployment asks for more than the class has room for while another class has room). A scale-up goes
to the class that serves most per replica (catalog throughput times GPUs per replica) with room now,
else to the fastest class under its max (its pod waits Pending: an autoscaler sees it); a scale-down
takes from the slowest class first. Each class stays within its own min/max; minimums fill fastest
first when the total is below their sum.

A migration (groups switched on or off, a class leaving the groups) never drops what serves: the
Deployments that go keep ``retiring_replicas`` until the ones that stay are ready, one replica fewer
per replica made ready beyond one (the rolling update's maxUnavailable of 1: a full pool frees a GPU
for the new pod), and are deleted once every replica is ready in the Deployments that stay.
Pure: the caller reads fit (placement) and the live Deployments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tide_operator.api.spec_workload import ServingGroup
from tide_operator.catalog import GpuCatalog, GpuClass
from tide_operator.control.actions import Bands
from tide_operator.control.cost_model import CostProfile, tokens_per_batch_size_table


@dataclass(frozen=True)
class GroupRequest:
    gpu_class: GpuClass
    gpus_per_replica: int
    min_replicas: int = 0
    max_replicas: int | None = None

    @property
    def per_replica_value(self) -> float:
        return self.gpu_class.inference_throughput * self.gpus_per_replica

    def capped(self, replicas: int) -> int:
        return replicas if self.max_replicas is None else min(replicas, self.max_replicas)


@dataclass(frozen=True)
class Split:
    replicas: tuple[tuple[str, int], ...]  # (class name, replicas) in the groups' order
    unplaced: int = 0  # replicas beyond every group's max: not run
    message: str = ""

    def of(self, gpu_class: str) -> int:
        return dict(self.replicas).get(gpu_class, 0)


def split_replicas(total: int, groups: Sequence[GroupRequest], fit: Mapping[str, int],
                   current: Mapping[str, int]) -> Split:
    """``total`` replicas across ``groups``; ``fit``: replicas of each class that can be placed now
    (this deployment's own pods count as room), ``current``: each group's replicas as last applied."""
    fastest = sorted(groups, key=lambda g: -g.per_replica_value)  # sorted() is stable: spec order on ties
    floors = _floors(total, fastest)
    alloc = {g.gpu_class.name: max(floors[g.gpu_class.name], g.capped(current.get(g.gpu_class.name, 0)))
             for g in groups}
    for g in reversed(fastest):  # too many: the slowest class gives up first
        name = g.gpu_class.name
        alloc[name] -= min(alloc[name] - floors[name], max(0, sum(alloc.values()) - total))
    _move_unplaceable(fastest, fit, floors, alloc)
    for _ in range(total - sum(alloc.values())):
        to = (next((g for g in fastest if _has_room(g, alloc, fit)), None)
              or next((g for g in fastest if _under_max(g, alloc)), None))
        if to is None:
            break
        alloc[to.gpu_class.name] += 1
    unplaced = total - sum(alloc.values())
    shares = tuple((g.gpu_class.name, alloc[g.gpu_class.name]) for g in groups)
    message = ", ".join(f"{name}={n}" for name, n in shares)
    if unplaced > 0:
        message += f"; {unplaced} replica(s) beyond every group's maxReplicas not run"
    return Split(shares, unplaced, message)


def _floors(total: int, fastest: Sequence[GroupRequest]) -> dict[str, int]:
    """Each group's minReplicas as far as the total allows, fastest class first."""
    floors, budget = {}, total
    for g in fastest:
        floors[g.gpu_class.name] = min(g.min_replicas, budget)
        budget -= floors[g.gpu_class.name]
    return floors


def _under_max(g: GroupRequest, alloc: Mapping[str, int]) -> bool:
    return g.max_replicas is None or alloc[g.gpu_class.name] < g.max_replicas


def _has_room(g: GroupRequest, alloc: Mapping[str, int], fit: Mapping[str, int]) -> bool:
    """One more replica of ``g`` is allowed and can be placed now."""
    return _under_max(g, alloc) and alloc[g.gpu_class.name] < fit.get(g.gpu_class.name, 0)


def _move_unplaceable(fastest: Sequence[GroupRequest], fit: Mapping[str, int], floors: Mapping[str, int],
                      alloc: dict[str, int]) -> None:
    """Replicas a class cannot place go to another class with room (a class keeps its floor)."""
    for g in fastest:
        name = g.gpu_class.name
        while alloc[name] > max(fit.get(name, 0), floors[name]):
            to = next((h for h in fastest if h is not g and _has_room(h, alloc, fit)), None)
            if to is None:
                break
            alloc[name] -= 1
            alloc[to.gpu_class.name] += 1


def vendor_problem(groups: Sequence[GroupRequest], image: str | None) -> str | None:
    """A spec's image is built for one vendor: groups on two vendors need the operator's image per vendor."""
    vendors = sorted({g.gpu_class.vendor for g in groups})
    if image is not None and len(vendors) > 1:
        return (f"one image cannot serve GPUs of {' and '.join(vendors)}: leave inference.image unset "
                "(the operator's image per vendor) or keep the serving groups on one vendor")
    return None


def group_requests(groups: Sequence[ServingGroup], catalog: GpuCatalog,
                   gpus_per_replica: int) -> tuple[GroupRequest, ...]:
    """The spec's groups with their catalog classes (inference.gpusPerReplica where a group sets none)."""
    by_name = {c.name: c for c in catalog.gpu_classes}
    return tuple(GroupRequest(by_name[g.gpu_class], g.gpus_per_replica or gpus_per_replica, g.min_replicas,
                              g.max_replicas) for g in groups if g.gpu_class in by_name)


def retiring_replicas(total: int, ready_staying: int, retiring_now: int) -> int:
    """Replicas the Deployments that go keep while those that stay become ready (never more than now):
    one fewer per ready replica, less one (maxUnavailable 1: a full pool frees a GPU for a new pod), at
    least one until every replica is ready where it stays, then none."""
    if total == 0 or ready_staying >= total:
        return 0
    return min(retiring_now, max(1, total - ready_staying - 1))


class ClassedPod(Protocol):
    @property
    def gpu_class(self) -> str | None: ...


PodT = TypeVar("PodT", bound=ClassedPod)


@dataclass(frozen=True)
class ClassTables:
    """Each serving group's own speculative tokens per batch size (servingGroups[].costProfile).

    The switch stays fleet-wide (it judges the draft); what a class's pods draft at each batch size
    follows its own draft and verify costs: the policy's table recomputed with the class's profile at the
    acceptance the table was made for. A class without a profile of its own runs the fleet's table, and
    without adaptive tokens (no table) every pod runs the launch table.
    """

    profiles: Mapping[str, CostProfile]
    num_speculative_tokens: int
    min_speedup: float  # the switch's off threshold: a band drafts only where it pays that much

    def for_class(self, gpu_class: str | None, fleet: Bands | None, acceptance: float | None) -> Bands | None:
        profile = self.profiles.get(gpu_class or "")
        if profile is None or fleet is None or not fleet or acceptance is None:
            return fleet
        rows = tokens_per_batch_size_table(acceptance, self.num_speculative_tokens, fleet[-1][1], profile,
                                           self.min_speedup)
        return tuple((start, end, k) for start, end, k in rows)

    def by_table(self, pods: Sequence[PodT], fleet: Bands | None,
                 acceptance: float | None) -> list[tuple[Bands | None, list[PodT] | None]]:
        """(table, pods) for each table the pods run; one entry, every pod (None), without own profiles."""
        if not self.profiles:
            return [(fleet, None)]
        groups: dict[Bands | None, list[PodT]] = {}
        for pod in pods:
            groups.setdefault(self.for_class(pod.gpu_class, fleet, acceptance), []).append(pod)
        return list(groups.items())
