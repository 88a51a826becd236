"""The local control plane behaves like a cluster: pods run as processes on fake GPU nodes.

Checks, against the real kube-apiserver, controller-manager and scheduler:
- a Deployment's pods run as processes, get their own loopback IP and become Ready via httpGet;
- env from ConfigMaps, Secrets and the downward API reaches the process, with $(VAR) expansion;
- a Job's pod exits 0 and the Job completes; a failing Job fails;
- a startup probe holds liveness off while a server loads; liveness restarts one that answers 503;
- a pod selecting the H100 class lands only on H100 nodes; one asking for too many GPUs stays
  Pending with the scheduler's reason;
- deleting a Deployment stops its processes; nodes stay Ready past the lifecycle grace period.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from kubernetes import client

from tests.integration.kubewait import wait_for

pytestmark = pytest.mark.integration

H100 = "NVIDIA-H100-80GB-HBM3"


def web_deployment(name: str, replicas: int = 2, node_selector: dict | None = None, gpus: int = 0) -> dict:
    container = {
        "name": "web", "image": "python:3.11",
        "command": ["python", "-m", "http.server", "$(PORT)", "--bind", "$(POD_IP)"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "PORT", "value": "8080"}],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    spec = {"containers": [container], "terminationGracePeriodSeconds": 5}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    }


def ready_pods(core: client.CoreV1Api, namespace: str, selector: str, count: int) -> list[client.V1Pod] | None:
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    return ready if len(ready) == count else None


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_deployment_pods_run_as_processes_and_become_ready(kube, namespace):
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    apps.create_namespaced_deployment(namespace, web_deployment("web"))
    pods = wait_for(lambda: ready_pods(core, namespace, "app=web", 2), "2 Ready web pods")

    ips = {p.status.pod_ip for p in pods}
    assert len(ips) == 2
    assert all(ip.startswith("127.") for ip in ips)
    for ip in ips:  # the process really serves on its own pod IP, same port for both replicas
        with urllib.request.urlopen(f"http://{ip}:8080/", timeout=5) as r:
            assert r.status == 200
    deployment = wait_for(lambda: (d := apps.read_namespaced_deployment("web", namespace)).status.ready_replicas == 2
                          and d, "deployment readyReplicas=2")
    assert deployment.status.available_replicas == 2


def test_env_from_configmap_secret_and_downward_api(kube, namespace, plane):
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"mode": "fast"}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "creds"}, "stringData": {"key": "s3cr3t"}})
    script = "import os; print('|'.join(os.environ[k] for k in ['MODE','KEY','NAME','NS','IP','TEAM','GREETING']))"
    container = {
        "name": "main", "image": "python:3.11", "command": ["python", "-c", script],
        "env": [
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "key"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}},
            {"name": "GREETING", "value": "hi-$(MODE)-$$(MODE)"},
        ],
    }
    job = {"metadata": {"name": "env"}, "spec": {"backoffLimit": 0, "template": {
        "metadata": {"labels": {"team": "infra"}},
        "spec": {"restartPolicy": "Never", "containers": [container]}}}}
    batch.create_namespaced_job(namespace, job)
    wait_for(lambda: batch.read_namespaced_job("env", namespace).status.succeeded, "job env to succeed")

    pod = core.list_namespaced_pod(namespace, label_selector="job-name=env").items[0]
    log = (plane_pod_log(plane, namespace, pod.metadata.name, "main")).strip()
    assert log == f"fast|s3cr3t|{pod.metadata.name}|{namespace}|{pod.status.pod_ip}|infra|hi-fast-$(MODE)"


def plane_pod_log(plane, namespace: str, pod: str, container: str) -> str:
    from pathlib import Path

    return (Path(plane.state_dir) / "pods" / namespace / pod / f"{container}.log").read_text()


def test_job_completes_and_a_failing_job_fails(kube, namespace):
    batch, core = client.BatchV1Api(kube), client.CoreV1Api(kube)
    for name, code in (("ok", 0), ("bad", 3)):
        batch.create_namespaced_job(namespace, {"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": {
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "python:3.11", "command": ["python", "-c", f"raise SystemExit({code})"]}]}}}})
    wait_for(lambda: batch.read_namespaced_job("ok", namespace).status.succeeded == 1, "job ok to complete")
    wait_for(lambda: batch.read_namespaced_job("bad", namespace).status.failed == 1, "job bad to fail")

    bad = core.list_namespaced_pod(namespace, label_selector="job-name=bad").items[0]
    assert bad.status.phase == "Failed"
    assert bad.status.container_statuses[0].state.terminated.exit_code == 3
    ok = batch.read_namespaced_job("ok", namespace)
    assert any(c.type == "Complete" and c.status == "True" for c in ok.status.conditions)


# A stand-in for vLLM's /health: slow to load (3 s before it listens), then 200 until the file named by
# DEAD appears (an engine that died: vLLM's server lives on and answers 503). A fresh start clears it.
ENGINE_LIKE = """
import http.server, os, time
dead = os.environ["DEAD"]
if os.path.exists(dead):
    os.remove(dead)
time.sleep(3)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503 if os.path.exists(dead) else 200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer((os.environ["POD_IP"], 8080), H).serve_forever()
"""


def test_startup_probe_covers_loading_and_liveness_restarts_a_dead_engine(kube, namespace, tmp_path):
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    dead = tmp_path / "engine-dead"
    health = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1, "timeoutSeconds": 1}
    deployment = web_deployment("engine", replicas=1)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container.update(command=["python", "-c", ENGINE_LIKE], readinessProbe=health,
                     startupProbe={**health, "failureThreshold": 30},
                     # Alone, this would kill the server twice over while it loads.
                     livenessProbe={**health, "failureThreshold": 2})
    container["env"].append({"name": "DEAD", "value": str(dead)})
    apps.create_namespaced_deployment(namespace, deployment)
    pod = wait_for(lambda: ready_pods(core, namespace, "app=engine", 1), "the engine-like pod Ready")[0]
    assert pod.status.container_statuses[0].restart_count == 0  # loading did not count against liveness

    dead.touch()
    wait_for(lambda: core.read_namespaced_pod(pod.metadata.name, namespace).status.container_statuses[0]
             .restart_count == 1, "liveness to restart the container answering 503", timeout_s=60)
    back = wait_for(lambda: ready_pods(core, namespace, "app=engine", 1), "the restarted pod Ready again")[0]
    assert back.metadata.name == pod.metadata.name
    assert back.status.container_statuses[0].restart_count == 1


def test_gpu_class_selection_lands_on_h100_nodes_only(kube, namespace):
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    apps.create_namespaced_deployment(namespace, web_deployment(
        "gpu", replicas=3, node_selector={"nvidia.com/gpu.product": H100}, gpus=1))
    pods = wait_for(lambda: ready_pods(core, namespace, "app=gpu", 3), "3 Ready gpu pods")

    nodes = {p.spec.node_name for p in pods}
    assert nodes <= {"h100-0", "h100-1"}
    for name in nodes:
        assert core.read_node(name).metadata.labels["nvidia.com/gpu.product"] == H100


def test_pod_asking_for_too_many_gpus_stays_pending_with_the_schedulers_reason(kube, namespace):
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "greedy"}, "spec": {"containers": [
        {"name": "main", "image": "python:3.11", "command": ["sleep", "60"],
         "resources": {"limits": {"nvidia.com/gpu": 16}}}]}})

    def unschedulable():
        pod = core.read_namespaced_pod("greedy", namespace)
        return next((c for c in pod.status.conditions or []
                     if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

    condition = wait_for(unschedulable, "PodScheduled=False/Unschedulable")
    assert "Insufficient nvidia.com/gpu" in condition.message
    time.sleep(2)  # and it stays unbound
    pod = core.read_namespaced_pod("greedy", namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


def test_deleting_a_deployment_stops_its_processes(kube, namespace):
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    apps.create_namespaced_deployment(namespace, web_deployment("doomed", replicas=2))
    wait_for(lambda: ready_pods(core, namespace, "app=doomed", 2), "2 Ready doomed pods")
    pids = [int(p.status.container_statuses[0].container_id.removeprefix("process://"))
            for p in core.list_namespaced_pod(namespace, label_selector="app=doomed").items]
    assert all(process_alive(pid) for pid in pids)

    apps.delete_namespaced_deployment("doomed", namespace, propagation_policy="Foreground")
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector="app=doomed").items or None,
             "doomed pods to be gone", timeout_s=60)
    wait_for(lambda: not any(process_alive(pid) for pid in pids), "doomed processes to exit", timeout_s=15)


def test_a_crashing_container_restarts_with_backoff(kube, namespace):
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "crashy"}, "spec": {"containers": [
        {"name": "main", "image": "python:3.11", "command": ["python", "-c", "raise SystemExit(1)"]}]}})

    def restarted_twice():
        statuses = core.read_namespaced_pod("crashy", namespace).status.container_statuses or []
        return statuses and statuses[0].restart_count >= 2 and statuses[0]

    status = wait_for(restarted_twice, "two restarts", timeout_s=30)
    assert status.last_state.terminated.exit_code == 1


def test_nodes_stay_ready_past_the_node_lifecycle_grace_period(kube):
    import datetime as dt

    from tide_localcluster.plane import NODE_MONITOR_GRACE_S

    core = client.CoreV1Api(kube)
    # The controller-manager marks nodes without heartbeats unreachable after its grace period.
    oldest = min(n.metadata.creation_timestamp for n in core.list_node().items)
    remaining = NODE_MONITOR_GRACE_S + 10 - (dt.datetime.now(dt.UTC) - oldest).total_seconds()
    if remaining > 0:
        time.sleep(remaining)
    for node in core.list_node().items:
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.status == "True", node.metadata.name
        assert not [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
