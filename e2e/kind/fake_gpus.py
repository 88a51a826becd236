"""Advertise fake GPUs on the kind workers, which have no device plugin.

Each worker labelled ``tide.dev/fake-node-pool=<pool>`` (cluster.yaml) gets its pool's extended
resources from pools.yaml (``nvidia.com/gpu``, ``amd.com/gpu``) in its status, the way Kubernetes
documents for node-level extended resources. The scheduler then counts them like real GPUs, the
kubelet admits pods that request them (no device plugin claims the name), and the operator's
placement sees them in ``allocatable``.

    KUBECONFIG=... python e2e/kind/fake_gpus.py
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tide_localcluster.nodepools import PoolSet, load_pools

POOLS = Path(__file__).with_name("pools.yaml")
POOL_LABEL = "tide.dev/fake-node-pool"  # the label the local plane's fake nodes carry too


def extended_resources(pools: PoolSet, node_labels: Mapping[str, str]) -> dict[str, str]:
    """The fake GPUs of a node: its pool's extended resources; {} for a node outside every pool.

    cpu, memory and pods are left out: the kubelet reports the real ones and would overwrite them.
    """
    pool = next((p for p in pools.pools if p.name == node_labels.get(POOL_LABEL)), None)
    if pool is None:
        return {}
    return {name: amount for name, amount in pool.capacity.items() if "/" in name}


def status_patch(resources: Mapping[str, str]) -> dict[str, Any]:
    # allocatable too, so nothing waits for the kubelet's next status update to copy it over.
    return {"status": {"capacity": dict(resources), "allocatable": dict(resources)}}


def advertise(core: Any, pools: PoolSet, timeout_s: float = 60) -> dict[str, dict[str, str]]:
    """Patch every pool node; return {node: resources} once the API shows them as allocatable."""
    wanted = {}
    for node in core.list_node().items:
        resources = extended_resources(pools, node.metadata.labels or {})
        if resources:
            core.patch_node_status(node.metadata.name, status_patch(resources))
            wanted[node.metadata.name] = resources
    expected = sum(p.count for p in pools.pools if any("/" in name for name in p.capacity))
    if len(wanted) != expected:
        raise RuntimeError(f"{len(wanted)} nodes carry {POOL_LABEL}, pools.yaml has {expected}: "
                           "does cluster.yaml label every worker?")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = {n.metadata.name: n.status.allocatable or {} for n in core.list_node().items}
        if all(all(nodes.get(name, {}).get(k) == v for k, v in res.items()) for name, res in wanted.items()):
            return wanted
        time.sleep(1)
    raise TimeoutError(f"fake GPUs not allocatable after {timeout_s:.0f}s: wanted {wanted}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=Path, default=POOLS)
    args = parser.parse_args(argv)
    from kubernetes import client, config

    config.load_kube_config()
    for node, resources in advertise(client.CoreV1Api(), load_pools(args.pools)).items():
        print(f"fake GPUs on {node}: {', '.join(f'{k}={v}' for k, v in sorted(resources.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
