"""Bring a real kube-apiserver, controller-manager and scheduler up on loopback, and down again.

Recipe and the flags that work with v1.20: shared/research/local-control-plane.md.
Everything a plane writes lives in one state directory; `down` stops exactly the processes
recorded there and removes it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import yaml

from tide_localcluster.binaries import kube_binary, system_binary
from tide_localcluster.processes import ProcessRecord, ProcessTable, is_alive, spawn

STARTUP_TIMEOUT_S = 90.0
OPERATOR_USER = "tide-operator"
# A second operator identity for the namespaced-RBAC test: only the Roles that test grants bind it,
# and the audit log records every request it makes, reads included, to derive the verbs it needs.
NAMESPACED_OPERATOR_USER = "tide-operator-namespaced"
# Node loss in test time: unreachable after the grace period, pods evicted after the toleration.
# The node agent's heartbeat period (heartbeat.HEARTBEAT_PERIOD_S) stays well below the grace.
NODE_MONITOR_GRACE_S = 16
EVICTION_TOLERATION_S = 30


@dataclass(frozen=True)
class PlaneInfo:
    """What a client needs to reach a running plane; stored as state.json."""

    state_dir: str
    server: str
    token: str
    kubeconfig: str
    operator_kubeconfig: str
    audit_log: str
    etcd_port: int
    apiserver_port: int
    prometheus_targets: str
    prometheus_url: str = ""
    namespaced_operator_kubeconfig: str = ""

    @classmethod
    def load(cls, state_dir: Path) -> PlaneInfo:
        path = state_dir / "state.json"
        if not path.is_file():
            raise FileNotFoundError(f"no local cluster state in {state_dir}: run `python -m tide_localcluster up`")
        return cls(**json.loads(path.read_text()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def up(state_dir: Path, pools_file: Path, images_file: Path | None = None,
       with_prometheus: bool = True) -> PlaneInfo:
    if (state_dir / "pids.json").exists():
        raise RuntimeError(f"a plane already runs from {state_dir}: run `python -m tide_localcluster down` first")
    state_dir.mkdir(parents=True, exist_ok=True)
    table = ProcessTable(state_dir / "pids.json")
    try:
        info = _start(state_dir, pools_file, images_file, table)
        if with_prometheus:
            from tide_localcluster.prometheus import start_prometheus

            server = start_prometheus(state_dir / "prometheus", Path(info.prometheus_targets))
            table.add(server.record)
            info = replace(info, prometheus_url=server.url)
            (state_dir / "state.json").write_text(json.dumps(asdict(info), indent=1))
        return info
    except BaseException:
        table.stop_all()
        raise


def down(state_dir: Path) -> None:
    ProcessTable(state_dir / "pids.json").stop_all()
    shutil.rmtree(state_dir, ignore_errors=True)


def _start(state_dir: Path, pools_file: Path, images_file: Path | None, table: ProcessTable) -> PlaneInfo:
    logs = state_dir / "logs"
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    token, operator_token, namespaced_token = secrets.token_hex(16), secrets.token_hex(16), secrets.token_hex(16)
    _write_credentials(state_dir, token, {OPERATOR_USER: operator_token, NAMESPACED_OPERATOR_USER: namespaced_token})
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    table.add(spawn("etcd", [
        str(system_binary("etcd", "etcd-server")), "--data-dir", str(state_dir / "etcd"),
        "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
        "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
    ], logs))
    _wait_http(f"{etcd_url}/health", None, "etcd", logs / "etcd.log")

    table.add(spawn("kube-apiserver", _apiserver_args(state_dir, etcd_url, api_port), logs))
    server = f"https://127.0.0.1:{api_port}"
    _wait_http(f"{server}/readyz", token, "kube-apiserver", logs / "kube-apiserver.log")
    kubeconfig = _write_kubeconfig(state_dir / "kubeconfig", server, "admin", token)
    operator_kubeconfig = _write_kubeconfig(state_dir / "operator.kubeconfig", server, OPERATOR_USER, operator_token)
    namespaced_kubeconfig = _write_kubeconfig(state_dir / "operator-namespaced.kubeconfig", server,
                                              NAMESPACED_OPERATOR_USER, namespaced_token)

    table.add(spawn("kube-controller-manager", [
        str(kube_binary("kube-controller-manager")), "--kubeconfig", str(kubeconfig),
        "--leader-elect=false", "--service-account-private-key-file", str(state_dir / "sa.key"),
        "--root-ca-file", str(state_dir / "certs" / "apiserver.crt"),
        "--use-service-account-credentials=false", "--bind-address", "127.0.0.1",
        "--secure-port", str(free_port()), "--port", "0",  # no fixed insecure port: planes can coexist
        # Fake nodes have no pod CIDR and no cloud: keep the controllers that assume one off.
        "--controllers", "*,-nodeipam,-cloud-node-lifecycle,-route,-service",
        # A lost node goes unreachable in test time (default 40 s); the agent beats every few seconds.
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE_S}s", "--node-monitor-period=2s",
    ], logs))
    table.add(spawn("kube-scheduler", [
        str(kube_binary("kube-scheduler")), "--kubeconfig", str(kubeconfig), "--leader-elect=false",
        "--bind-address", "127.0.0.1", "--secure-port", str(free_port()), "--port", "0",
    ], logs))

    info = PlaneInfo(state_dir=str(state_dir), server=server, token=token, kubeconfig=str(kubeconfig),
                     operator_kubeconfig=str(operator_kubeconfig), audit_log=str(state_dir / "audit.log"),
                     namespaced_operator_kubeconfig=str(namespaced_kubeconfig),
                     etcd_port=etcd_port, apiserver_port=api_port,
                     prometheus_targets=str(state_dir / "prometheus" / "targets.json"))
    (state_dir / "state.json").write_text(json.dumps(asdict(info), indent=1))

    agent_args = [sys.executable, "-m", "tide_localcluster", "--state", str(state_dir), "agent",
                  "--pools", str(pools_file)]
    if images_file is not None:
        agent_args += ["--images", str(images_file)]
    agent = spawn("node-agent", agent_args, logs, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    table.add(agent)
    _wait_nodes_ready(info, pools_file, agent)
    for record in table.load():  # a component that died at start (e.g. a port clash) fails `up` now
        if not is_alive(record):
            raise RuntimeError(f"{record.name} exited during start; its log:\n{tail(Path(record.log))}")
    return info


def _apiserver_args(state_dir: Path, etcd_url: str, port: int) -> list[str]:
    return [
        str(kube_binary("kube-apiserver")), f"--etcd-servers={etcd_url}",
        "--cert-dir", str(state_dir / "certs"), "--secure-port", str(port), "--bind-address", "127.0.0.1",
        "--service-account-issuer", "https://kubernetes.default.svc",
        "--service-account-key-file", str(state_dir / "sa.pub"),
        "--service-account-signing-key-file", str(state_dir / "sa.key"),
        "--token-auth-file", str(state_dir / "tokens.csv"), "--authorization-mode", "RBAC",
        "--service-cluster-ip-range", "10.0.0.0/24", "--allow-privileged",
        # Pods on a lost node are evicted after 30 s instead of 5 min (the DefaultTolerationSeconds plugin).
        f"--default-unreachable-toleration-seconds={EVICTION_TOLERATION_S}",
        f"--default-not-ready-toleration-seconds={EVICTION_TOLERATION_S}",
        # Every write the operator's user makes is logged, so tests can count them.
        "--audit-policy-file", str(_write_audit_policy(state_dir)),
        "--audit-log-path", str(state_dir / "audit.log"), "--audit-log-format", "json",
    ]


def _write_audit_policy(state_dir: Path) -> Path:
    policy = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": [
        # Its writes, lists and gets (a pass reads watch caches: tests and bench/scale_bench.py count the
        # requests it still makes). Watches stay out: one is logged only when it closes.
        {"level": "Metadata", "users": [OPERATOR_USER],
         "verbs": ["create", "update", "patch", "delete", "deletecollection", "list", "get"]},
        {"level": "Metadata", "users": [NAMESPACED_OPERATOR_USER]},
        {"level": "None"},
    ]}
    path = state_dir / "audit-policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def _write_credentials(state_dir: Path, token: str, operator_tokens: dict[str, str]) -> None:
    openssl = str(system_binary("openssl", "openssl"))
    subprocess.run([openssl, "genrsa", "-out", str(state_dir / "sa.key"), "2048"], check=True,
                   capture_output=True)
    subprocess.run([openssl, "rsa", "-in", str(state_dir / "sa.key"), "-pubout", "-out",
                    str(state_dir / "sa.pub")], check=True, capture_output=True)
    # The operator gets a user of its own with no rights but what RBAC grants it (the chart's role).
    users = "".join(f"{secret},{user},{user}\n" for user, secret in operator_tokens.items())
    (state_dir / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n{users}")


def _write_kubeconfig(path: Path, server: str, user: str, token: str) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "tide-local",
        "clusters": [{"name": "tide-local", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "tide-local", "context": {"cluster": "tide-local", "user": user}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _wait_http(url: str, token: str | None, what: str, log: Path) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the apiserver's self-signed loopback cert
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2,
                                        context=context if url.startswith("https") else None) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} not ready after {STARTUP_TIMEOUT_S:.0f}s; last log lines:\n{tail(log)}")


def _wait_nodes_ready(info: PlaneInfo, pools_file: Path, agent: ProcessRecord) -> None:
    from kubernetes import client

    from tide_localcluster.client import api_client
    from tide_localcluster.nodepools import load_pools

    expected = {n.name for n in load_pools(pools_file).nodes()}
    core = client.CoreV1Api(api_client(info))
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        ready = {n.metadata.name for n in core.list_node().items
                 if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))}
        if expected <= ready:
            return
        if not is_alive(agent):
            raise RuntimeError(f"the node agent exited; its log:\n{tail(Path(agent.log))}")
        time.sleep(0.5)
    raise TimeoutError(f"nodes {sorted(expected)} not Ready; node agent log:\n{tail(Path(agent.log))}")


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
