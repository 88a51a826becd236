"""Register the fake nodes and keep them alive the way a kubelet does.

Without a renewed Lease and Ready heartbeat the controller-manager's node lifecycle controller
marks a node unreachable after ~40 s and taints it, evicting everything (see the recipe).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from kubernetes import client
from kubernetes.client.rest import ApiException

from tide_localcluster.nodepools import FakeNode, node_body

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
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
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "tide process kubelet is posting ready status",
             "lastHeartbeatTime": stamp, "lastTransitionTime": stamp},
            *({"type": t, "status": "False", "reason": f"KubeletHasNo{t.removesuffix('Pressure')}Pressure",
               "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
              for t in ("MemoryPressure", "DiskPressure", "PIDPressure")),
        ],
        "nodeInfo": {"kubeletVersion": "v1.20.2-tide-process", "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "amd64", "containerRuntimeVersion": "tide-process://1",
                     "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": ""},
    }}


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
    # Only the Ready heartbeat moves; transition times stay as they were.
    current = core.read_node_status(node.name)
    conditions = [c.to_dict() for c in current.status.conditions or []]
    for c in conditions:
        c["last_heartbeat_time"] = stamp
    patch = {"status": {"conditions": [client.ApiClient().sanitize_for_serialization(client.V1NodeCondition(**c))
                                       for c in conditions]}}
    core.patch_node_status(node.name, patch)


def run_heartbeats(api: client.ApiClient, nodes: list[FakeNode], stop: threading.Event,
                   period_s: float = 5.0) -> None:
    core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)
    while not stop.is_set():
        for node in nodes:
            try:
                renew(core, coordination, node)
            except ApiException as e:
                if e.status == 404:
                    register(core, node)  # someone deleted the Node: a kubelet re-registers
                else:
                    log.warning("heartbeat for %s failed: %s", node.name, e.reason)
            except OSError as e:
                log.warning("heartbeat for %s failed: %s", node.name, e)
        stop.wait(period_s)
