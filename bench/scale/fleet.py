"""The scale benchmark's cluster: GPU pools sized for the simulator pods, TideDeployments (the first
``with_pods`` serve one simulator pod each, the rest ``replicas: 0``), and unrelated Pending pods."""

from __future__ import annotations

import copy
import math
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tide_localcluster.client import api_client
from tide_operator.api import GROUP, PLURAL, VERSION

NAMESPACE, PENDING_NAMESPACE, BUCKET = "scale", "scale-pending", "tide-scale"
# Pending pods ask for a node label no node has: they stay Pending, the scheduler never binds them.
NOWHERE = {"tide.dev/scale-bench": "nowhere"}
H100 = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "hopper"}
MI250 = {"amd.com/gpu.family": "AI", "amd.com/gpu.product-name": "AMD_Instinct_MI250X_MI250",
         "amd.com/gpu.device-id": "740c", "amd.com/gpu.vram": "64G"}
# The simulator at a steady, low load with a good draft: speculation settles on and stays on.
SCENARIO = {"seed": 3, "acceptance": {"initial": {"general": 0.6}},
            "timeline": [{"at_s": 0, "domain": "general", "background_running": 4}]}


def write_pools(path: Path, with_pods: int) -> Path:
    """One spare H100 node beyond what the simulator pods fill (8 GPUs a node), and the training pool."""
    h100 = math.ceil(with_pods / 8) + 1
    path.write_text(yaml.safe_dump({"pools": [
        {"name": "h100", "count": h100, "labels": H100,
         "capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}},
        {"name": "mi250", "count": 1, "labels": MI250,
         "capacity": {"cpu": "64", "memory": "512Gi", "amd.com/gpu": "4"}},
    ]}))
    return path


def operator_config(scenario_file: Path) -> dict[str, Any]:
    """The product defaults (resync, Prometheus interval and window); the simulator serves."""
    return {"serving": {"command": [sys.executable, "-m", "tide_vllm_sim", "--sim-scenario", str(scenario_file)]}}


def spec(endpoint: str, replicas: int) -> dict[str, Any]:
    """Default control settings, but no capture and no training: a steady fleet, not a learning one."""
    return {
        "target": {"model": "tide-local/tiny", "revision": "r1", "servedModelName": "chat"},
        "draft": {"method": "eagle3", "initial": f"s3://{BUCKET}/seed-draft", "numSpeculativeTokens": 3},
        "inference": {"replicas": replicas, "gpusPerReplica": 1},
        "control": {"capture": {"enabled": False}, "adaptiveSpeculativeTokens": False},
        "storage": {"s3": {"bucket": BUCKET, "endpoint": endpoint, "credentialsSecret": "s3-creds"}},
    }


def name_of(index: int) -> str:
    return f"td-{index:03d}"


class Fleet:
    def __init__(self, info: Any, s3_endpoint: str) -> None:
        self.info, self.s3_endpoint = info, s3_endpoint
        self.api = api_client(info)
        self.core, self.objects = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        self.size = 0

    def prepare(self) -> None:
        for ns in (NAMESPACE, PENDING_NAMESPACE):
            self.core.create_namespace({"metadata": {"name": ns}})
            wait(lambda ns=ns: any(sa.secrets for sa in self.core.list_namespaced_service_account(ns).items),
                 f"the service account token in {ns}", 60)
        self.core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": "s3-creds"}, "stringData": {
            "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}})

    def grow(self, size: int, with_pods: int) -> None:
        """TideDeployments up to ``size``; index i < with_pods serves one pod (earlier ones stay as they are)."""
        for i in range(self.size, size):
            self.objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": name_of(i)},
                "spec": copy.deepcopy(spec(self.s3_endpoint, 1 if i < with_pods else 0))})
        self.size = max(self.size, size)

    def steady(self, with_pods: int) -> str | None:
        """None once every deployment with a pod serves and every other one has acted on its spec;
        else what is still missing (for the progress line)."""
        items = self.objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["items"]
        waiting = []
        for td in items:
            st, index = td.get("status") or {}, int(td["metadata"]["name"].split("-")[1])
            acted = st.get("observedGeneration") == td["metadata"].get("generation")
            if not acted or (index < with_pods and st.get("phase") != "Serving"):
                waiting.append(f"{td['metadata']['name']}={st.get('phase', '-')}")
        return f"{len(waiting)} not steady: {' '.join(waiting[:5])}" if waiting else None

    def pending_pods(self, count: int, workers: int = 8) -> int:
        """``count`` Pending pods in their own namespace, created by parallel clients; returns how many exist."""
        local = threading.local()

        def create(i: int) -> None:
            if not hasattr(local, "core"):
                local.core = client.CoreV1Api(api_client(self.info))
            body = {"metadata": {"name": f"pending-{i:05d}", "labels": {"app": "unrelated"}},
                    "spec": {"nodeSelector": NOWHERE, "automountServiceAccountToken": False,
                             "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.2"}]}}
            try:
                local.core.create_namespaced_pod(PENDING_NAMESPACE, body)
            except ApiException as e:
                if e.status != 409:
                    raise

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(create, range(count)))
        return self.pending_count()

    def pending_count(self) -> int:
        pods = self.core.list_namespaced_pod(PENDING_NAMESPACE).items
        return sum(1 for p in pods if p.status.phase == "Pending" and not p.spec.node_name)


def wait(probe: Callable[[], Any], what: str, timeout_s: float, every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every_s)
    raise TimeoutError(f"gave up waiting for {what}")


def write_scenario(path: Path) -> Path:
    path.write_text(yaml.safe_dump(SCENARIO))
    return path
