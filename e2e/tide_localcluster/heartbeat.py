"""Register the fake nodes and keep them alive the way a kubelet does.

Without a renewed Lease and Ready heartbeat the controller-manager's node lifecycle controller
marks a node unreachable after ~40 s and taints it, evicting everything (see the recipe).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from tide_localcluster.nodepools import FakeNode, node_body

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
# Several beats fit in the controller-manager's --node-monitor-grace-period (plane.NODE_MONITOR_GRACE_S).
HEARTBEAT_PERIOD_S = 3.0
log = logging.getLogger("heartbeat")


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def register(core: client.CoreV1Api, node: FakeNode) -> None:
    body = node_body(node)
    try:
        core.create_node(body)
    except ApiException as e:
        if e.status != 409:
            raise
        core.patch_node(node.name, {"metadata": {"labels": node.labels}, "spec": body["spec"]})
    core.patch_node_status(node.name, _status(node))


def _status(node: FakeNode) -> dict:
    stamp = now().isoformat()
    return {"status": {
        "capacity": node.capacity, "allocatable": node.capacity,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                      {"type": "Hostname", "address": node.name}],
        "conditions": _status_conditions(stamp),
        "nodeInfo": {"kubeletVersion": "v1.20.2-tide-process", "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "amd64", "containerRuntimeVersion": "tide-process://1",
                     "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": ""},
    }}


def _status_conditions(stamp: str) -> list[dict]:
    return [
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "tide process kubelet is posting ready status",
         "lastHeartbeatTime": stamp, "lastTransitionTime": stamp},
        *({"type": t, "status": "False", "reason": f"KubeletHasNo{t.removesuffix('Pressure')}Pressure",
           "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
          for t in ("MemoryPressure", "DiskPressure", "PIDPressure")),
    ]


def renew(core: client.CoreV1Api, coordination: client.CoordinationV1Api, node: FakeNode) -> None:
    stamp = now()
    lease = {"metadata": {"name": node.name, "namespace": LEASE_NAMESPACE},
             "spec": {"holderIdentity": node.name, "leaseDurationSeconds": LEASE_SECONDS,
                      "renewTime": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}
    try:
        coordination.patch_namespaced_lease(node.name, LEASE_NAMESPACE, {"spec": lease["spec"]})
    except ApiException as e:
        if e.status != 404:
            raise
        coordination.create_namespaced_lease(LEASE_NAMESPACE, lease)
    current = core.read_node_status(node.name)
    core.patch_node_status(node.name, {"status": {"conditions": healthy_conditions(
        client.ApiClient().sanitize_for_serialization(current.status.conditions or []), stamp.isoformat())}})


def healthy_conditions(current: list[dict], stamp: str) -> list[dict]:
    """What a healthy kubelet posts: Ready=True and no pressure, heartbeats at ``stamp``.

    A condition keeps its transition time while its status stays; one the node lifecycle
    controller set to Unknown (heartbeats were late, e.g. across an apiserver restart) flips back.
    """
    before = {c["type"]: c for c in current}
    out = []
    for wanted in _status_conditions(stamp):
        old = before.get(wanted["type"])
        if old is not None and old.get("status") == wanted["status"] and old.get("lastTransitionTime"):
            wanted["lastTransitionTime"] = old["lastTransitionTime"]
        out.append(wanted)
    return out


def run_heartbeats(api: client.ApiClient, nodes: list[FakeNode], stop: threading.Event,
                   period_s: float = HEARTBEAT_PERIOD_S,
                   lost: Callable[[], frozenset[str]] = frozenset) -> None:
    """Renew every node's heartbeat each period, except the nodes ``lost()`` names (a fault)."""
    core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)
    while not stop.is_set():
        silent = lost()
        for node in (n for n in nodes if n.name not in silent):
            _beat(core, coordination, node)
        stop.wait(period_s)


def _beat(core: client.CoreV1Api, coordination: client.CoordinationV1Api, node: FakeNode) -> None:
    """One heartbeat; a failure is logged and the next period tries again (the thread never dies)."""
    try:
        try:
            renew(core, coordination, node)
        except ApiException as e:
            if e.status != 404:
                raise
            register(core, node)  # someone deleted the Node: a kubelet re-registers
    except ApiException as e:
        log.warning("heartbeat for %s failed: %s", node.name, e.reason)
    except (HTTPError, OSError) as e:  # the apiserver away (restarting)
        log.warning("heartbeat for %s failed: %s", node.name, e)
