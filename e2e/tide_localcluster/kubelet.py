"""A kubelet that runs each container of a pod bound to a fake node as a local process.

Each pod gets its own loopback address as pod IP (so two replicas can bind the same port), its
env from the spec (values, ConfigMaps, Secrets, downward API), `$(VAR)` expansion in command
and args, logs in files, status from the process, its probes and its readiness gates, and
SIGTERM-then-SIGKILL of its whole process group when the pod is deleted. Not modelled: volumes,
images, networking beyond loopback, resource enforcement.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from tide_localcluster.faults import FaultError, lost_nodes
from tide_localcluster.images import ImageCatalog
from tide_localcluster.podrunner import PodRunner, server_side
from tide_localcluster.processes import ProcessTable

log = logging.getLogger("kubelet")
SYNC_PERIOD_S = 0.5


class PodAddresses:
    """Hands out 127.N.x.y addresses, never reusing one a live pod holds.

    N is per plane (from its state directory, so a restarted agent keeps it): two planes on one
    machine would otherwise give their pods the same addresses and answer each other's requests.
    """

    def __init__(self, network: int = 1) -> None:
        if not 1 <= network <= 254:
            raise ValueError(f"pod network 127.{network}.0.0/16: the second octet must be in 1..254")
        self.network = network
        self._next = 1
        self._used: set[str] = set()
        self._lock = threading.Lock()

    def reserve(self, ip: str) -> None:
        with self._lock:
            self._used.add(ip)

    def allocate(self) -> str:
        with self._lock:
            while True:
                n, self._next = self._next, self._next % 65_000 + 1
                ip = f"127.{self.network}.{n // 250}.{n % 250 + 2}"
                if ip not in self._used:
                    self._used.add(ip)
                    return ip

    def release(self, ip: str) -> None:
        with self._lock:
            self._used.discard(ip)


def pod_network(state_dir: Path) -> int:
    """The plane's pod network octet, 1..254, stable for a state directory."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).digest()
    return 1 + int.from_bytes(digest[:4], "big") % 254


class Kubelet:
    def __init__(self, api: client.ApiClient, node_names: set[str], state_dir: Path, images: ImageCatalog,
                 targets_file: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.node_names = node_names
        self.state_dir = state_dir
        self.images = images
        self.targets_file = targets_file
        self.addresses = PodAddresses(pod_network(state_dir))
        self.processes = ProcessTable(state_dir / "pod-processes.json")
        self.process_lock = threading.Lock()
        self.runners: dict[str, PodRunner] = {}
        self._last_targets: list[dict[str, Any]] | None = None

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.sync()
            except (ApiException, HTTPError, OSError) as e:  # the apiserver away (restarting): sync again
                log.warning("sync failed: %s", e)
            stop.wait(SYNC_PERIOD_S)
        self.shutdown()

    def sync(self) -> None:
        # A lost node's pods are left alone: not started, not deleted, and their runners (below, as
        # pods not seen) killed without a word, as a machine that lost power would (faults.lose_node).
        serving = self.node_names - self.lost()
        pods = [p for p in self.core.list_pod_for_all_namespaces().items if p.spec.node_name in serving]
        seen = set()
        for pod in pods:
            uid = pod.metadata.uid
            seen.add(uid)
            runner = self.runners.get(uid)
            if pod.metadata.deletion_timestamp is not None:
                self._delete(pod, runner)
            elif runner is None and pod.status.phase not in ("Succeeded", "Failed"):
                self._start(pod)
            elif runner is not None:  # a readiness gate's condition may have changed: Ready follows it
                runner.observe({c.type: c.status for c in pod.status.conditions or []})
        for uid in set(self.runners) - seen:  # force-deleted behind our back, or on a lost node
            self.runners.pop(uid).stop(grace_s=0)
        self._write_targets()

    def lost(self) -> frozenset[str]:
        try:
            return lost_nodes(self.state_dir)
        except (FaultError, OSError, ValueError) as e:  # a bad fault file loses no node
            log.warning("lost-node file ignored: %s", e)
            return frozenset()

    def _start(self, pod: client.V1Pod) -> None:
        raw = self.core.api_client.sanitize_for_serialization(pod)
        if pod.status.pod_ip and pod.status.pod_ip.startswith("127."):
            ip = pod.status.pod_ip  # a restarted agent keeps the address already reported
            self.addresses.reserve(ip)
        else:
            ip = self.addresses.allocate()
        runner = PodRunner(raw, ip, self)
        self.runners[pod.metadata.uid] = runner
        runner.start()

    def _delete(self, pod: client.V1Pod, runner: PodRunner | None) -> None:
        grace = pod.metadata.deletion_grace_period_seconds or 0
        if runner is not None and not runner.stopping:
            runner.stop(grace_s=float(grace), then_delete=True)
        elif runner is None:
            self.finalize_delete(pod.metadata.namespace, pod.metadata.name, pod.metadata.uid)

    def finalize_delete(self, namespace: str, name: str, uid: str) -> None:
        """What a kubelet does once the containers are gone: delete with grace 0."""
        log.info("pod %s/%s: containers stopped, deleting", namespace, name)
        try:
            # With a body, the apiserver ignores query parameters: the grace period goes in the body.
            self.core.delete_namespaced_pod(name, namespace, body=client.V1DeleteOptions(
                grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)))
        except ApiException as e:
            if e.status not in (404, 409) and not server_side(e):
                raise
            if e.status not in (404, 409):
                log.warning("pod %s/%s: delete not confirmed (%s), again next sync", namespace, name, e.status)
        except HTTPError as e:  # the next sync sees the pod still terminating and confirms again
            log.warning("pod %s/%s: delete not confirmed (%s), again next sync", namespace, name, type(e).__name__)

    def forget(self, uid: str, ip: str) -> None:
        self.runners.pop(uid, None)
        self.addresses.release(ip)

    def record_process(self, record: Any) -> None:
        with self.process_lock:
            self.processes.add(record)

    def drop_process(self, pid: int) -> None:
        with self.process_lock:
            self.processes.remove(pid)

    def pod_dir(self, namespace: str, name: str) -> Path:
        path = self.state_dir / "pods" / namespace / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def shutdown(self) -> None:
        runners = list(self.runners.values())
        for runner in runners:
            runner.stop(grace_s=10.0)
        deadline = time.monotonic() + 15
        for runner in runners:
            runner.join(timeout=max(0.0, deadline - time.monotonic()))

    def _write_targets(self) -> None:
        targets = [t for r in list(self.runners.values()) if (t := scrape_target(r.pod, r.ip, r.is_running()))]
        targets.sort(key=lambda t: t["targets"][0])
        if targets == self._last_targets:
            return
        self.targets_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(targets, indent=1))
        os.replace(tmp, self.targets_file)  # Prometheus must never read a half-written file
        self._last_targets = targets


def scrape_target(pod: dict[str, Any], ip: str, running: bool) -> dict[str, Any] | None:
    """A Prometheus file_sd entry for a pod annotated prometheus.io/scrape=true, labels kept."""
    meta = pod["metadata"]
    annotations = meta.get("annotations") or {}
    if not running or annotations.get("prometheus.io/scrape") != "true" or "prometheus.io/port" not in annotations:
        return None
    labels = {"namespace": meta["namespace"], "pod": meta["name"]}
    for key, value in (meta.get("labels") or {}).items():
        labels["label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    if "prometheus.io/path" in annotations:
        labels["__metrics_path__"] = annotations["prometheus.io/path"]
    return {"targets": [f"{ip}:{annotations['prometheus.io/port']}"], "labels": labels}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
