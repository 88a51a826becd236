"""Fake GPU node pools described in a small YAML file, turned into Node objects.

Example (see pools/default.yaml):

    pools:
      - name: h100            # nodes are named h100-0, h100-1, ...
        count: 2
        labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        capacity: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8"}
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEFAULT_CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110"}


class PoolFileError(ValueError):
    """The node-pool file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class FakeNode:
    name: str
    pool: str
    labels: dict[str, str]
    capacity: dict[str, str]
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class NodePool:
    name: str
    count: int
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    def nodes(self) -> list[FakeNode]:
        return [FakeNode(name=f"{self.name}-{i}", pool=self.name, taints=self.taints,
                         labels={**self.labels, "kubernetes.io/hostname": f"{self.name}-{i}",
                                 "tide.dev/fake-node-pool": self.name},
                         capacity={**DEFAULT_CAPACITY, **self.capacity})
                for i in range(self.count)]


@dataclass(frozen=True)
class PoolSet:
    pools: tuple[NodePool, ...]

    def nodes(self) -> list[FakeNode]:
        return [n for p in self.pools for n in p.nodes()]


def load_pools(path: Path) -> PoolSet:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise PoolFileError(f"{path}: cannot read node-pool file: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise PoolFileError(f"{path}: not valid YAML: {e}") from e
    return parse_pools(raw, source=str(path))


def parse_pools(raw: Any, source: str = "<pools>") -> PoolSet:
    def fail(where: str, why: str) -> PoolFileError:
        return PoolFileError(f"{source}: {where}: {why}")

    if not isinstance(raw, dict) or not isinstance(raw.get("pools"), list) or not raw["pools"]:
        raise fail("pools", "must be a non-empty list of node pools")
    unknown_top = set(raw) - {"pools"}
    if unknown_top:
        raise fail(sorted(unknown_top)[0], "unknown field (expected only `pools`)")
    pools = tuple(_parse_pool(p, f"pools[{i}]", fail) for i, p in enumerate(raw["pools"]))
    names = [p.name for p in pools]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise fail("pools", f"pool name {duplicate!r} appears twice")
    return PoolSet(pools)


def _parse_pool(raw: Any, where: str, fail: Any) -> NodePool:
    if not isinstance(raw, dict):
        raise fail(where, "must be a mapping with name, count, labels, capacity, taints")
    unknown = set(raw) - {"name", "count", "labels", "capacity", "taints"}
    if unknown:
        raise fail(f"{where}.{sorted(unknown)[0]}", "unknown field")
    name = raw.get("name")
    if not isinstance(name, str) or not _DNS_LABEL.match(name) or len(name) > 50:
        raise fail(f"{where}.name", f"must be a DNS label (lower-case letters, digits, '-'), got {name!r}")
    count = raw.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 50:
        raise fail(f"{where}.count", f"must be an integer from 1 to 50, got {count!r}")
    labels = _string_map(raw.get("labels", {}), f"{where}.labels", fail)
    capacity = _string_map(raw.get("capacity", {}), f"{where}.capacity", fail)
    for key, value in capacity.items():
        if not _QUANTITY.match(value):
            raise fail(f"{where}.capacity.{key}", f"must be a Kubernetes quantity like 8, 500m or 64Gi, got {value!r}")
    taints = tuple(_parse_taint(t, f"{where}.taints[{i}]", fail) for i, t in enumerate(raw.get("taints") or []))
    return NodePool(name=name, count=count, labels=labels, capacity=capacity, taints=taints)


def _string_map(raw: Any, where: str, fail: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise fail(where, "must be a mapping of strings")
    out = {}
    for key, value in raw.items():
        if not isinstance(key, str) or isinstance(value, (dict, list)) or value is None:
            raise fail(f"{where}.{key}", "must be a string or number")
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _parse_taint(raw: Any, where: str, fail: Any) -> Taint:
    if not isinstance(raw, dict) or not isinstance(raw.get("key"), str):
        raise fail(where, "must be a mapping with key, value and effect")
    if raw.get("effect") not in _EFFECTS:
        raise fail(f"{where}.effect", f"must be one of {', '.join(_EFFECTS)}, got {raw.get('effect')!r}")
    return Taint(key=raw["key"], effect=raw["effect"], value=str(raw.get("value", "")))


def node_body(node: FakeNode) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": node.labels},
        "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]},
    }
