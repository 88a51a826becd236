"""Install the operator into a local plane: its CRD, its least-privilege RBAC, its process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tide_localcluster.plane import OPERATOR_USER, free_port, tail
from tide_operator.api.crd import crd_without_cel
from tide_operator.rbac import cluster_role, leader_election_rbac, namespaced_rbac

# The stand-in speaks vLLM's command line and routes; the operator's manifests stay unchanged.
TEST_OPERATOR_CONFIG = {
    "resyncIntervalSeconds": 2,
    "serving": {"command": [sys.executable, "-m", "tide_vllm_sim"]},
}


# The tests' S3 servers (moto) listen on loopback on ports chosen at start: specs with their own
# credentials may name them (docs/security.md, storage tenancy), unless a test configures storage.
LOOPBACK_STORAGE: dict[str, Any] = {"allowedEndpoints": ["http://127.0.0.1", "http://localhost"]}


def install_crd(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    body = crd_without_cel()  # the v1.20 test plane has no CEL; rules are unit-tested with cel-python
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as e:
        if e.status != 409:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = ext.read_custom_resource_definition(body["metadata"]["name"])
        if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
            return
        time.sleep(0.2)
    raise TimeoutError("CRD not Established")


def grant_namespaced_operator_rbac(api: client.ApiClient, namespaces: list[str], user: str, name: str) -> None:
    """The RBAC the chart renders with ``watchNamespaces``, bound to ``user``: Roles in ``namespaces``
    and the cluster-wide reads in a ClusterRole named ``name``."""
    rbac = client.RbacAuthorizationV1Api(api)
    subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
    create = {"ClusterRole": rbac.create_cluster_role, "ClusterRoleBinding": rbac.create_cluster_role_binding,
              "Role": rbac.create_namespaced_role, "RoleBinding": rbac.create_namespaced_role_binding}
    for body in namespaced_rbac(namespaces, subject, name):
        namespace = body["metadata"].get("namespace")
        create[body["kind"]](*((namespace, body) if namespace else (body,)))


def grant_operator_rbac(api: client.ApiClient) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    role = cluster_role()
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "tide-operator"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tide-operator"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}]}
    for create, body in ((rbac.create_cluster_role, role), (rbac.create_cluster_role_binding, binding)):
        try:
            create(body)
        except ApiException as e:
            if e.status != 409:
                raise


def grant_leader_election_rbac(api: client.ApiClient, namespace: str, lease_name: str,
                               user: str = OPERATOR_USER) -> None:
    """The chart's leader-election Role (the Lease by name, in ``namespace``) bound to ``user``."""
    rbac = client.RbacAuthorizationV1Api(api)
    subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
    role, binding = leader_election_rbac(namespace, subject, f"tide-operator-{lease_name}", lease_name)
    rbac.create_namespaced_role(namespace, role)
    rbac.create_namespaced_role_binding(namespace, binding)


class OperatorProcess:
    """``python -m tide_operator`` against the plane. One process acts at once by default
    (``--no-leader-election``); ``lease=(namespace, name)`` runs it as a replica electing a leader."""

    def __init__(self, plane: Any, config: dict[str, Any] | None = None, kubeconfig: str | None = None,
                 namespaces: tuple[str, ...] = (), lease: tuple[str, str] | None = None,
                 name: str = "operator") -> None:
        self.plane = plane
        self.config = config or TEST_OPERATOR_CONFIG
        self.kubeconfig = kubeconfig or plane.operator_kubeconfig
        self.namespaces = namespaces  # watched (Kopf's --namespace); none: cluster-wide
        self.lease = lease
        self.name = name  # its log and config file names: replicas of one test keep theirs apart
        self.log = Path(plane.state_dir) / "logs" / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.metrics_port = free_port()

    def start(self) -> OperatorProcess:
        config_file = Path(self.plane.state_dir) / f"{self.name}-config.yaml"
        config = dict(self.config)
        if self.plane.prometheus_url:  # the plane's own Prometheus, unless the test says otherwise
            config = {"prometheusUrl": self.plane.prometheus_url, **config}
        config.setdefault("storage", LOOPBACK_STORAGE)
        # The plane's GPU nodes are fakes: trainers run on CPU instead of exiting 8 (no GPU visible).
        config["trainer"] = {"cpuOnly": True, **config.get("trainer", {})}
        if self.lease is not None:
            namespace, lease_name = self.lease
            config["leaderElection"] = {"leaseNamespace": namespace, "leaseName": lease_name,
                                        **config.get("leaderElection", {})}
        config_file.write_text(yaml.safe_dump(config))
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, "TIDE_OPERATOR_CONFIG": str(config_file),
               "TIDE_METRICS_PORT": str(self.metrics_port), "PYTHONUNBUFFERED": "1"}
        if self.lease is not None:
            env["HOSTNAME"] = self.name  # its Lease holder identity and User-Agent start with it
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tide_operator", "--liveness", f"http://127.0.0.1:{self.port}/healthz",
                 *(f"--namespace={n}" for n in self.namespaces),
                 *(() if self.lease else ("--no-leader-election",))],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._wait_alive()
        return self

    def _wait_alive(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"operator exited with {self.process.returncode}:\n{tail(self.log)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        raise TimeoutError(f"operator liveness never answered:\n{tail(self.log)}")

    def stop(self, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
