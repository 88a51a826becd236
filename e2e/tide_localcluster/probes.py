"""Readiness and liveness probes as the kubelet runs them: httpGet, tcpSocket, exec."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class ProbeState:
    """Consecutive results, so thresholds apply as in Kubernetes."""

    successes: int = 0
    failures: int = 0
    last_run: float = float("-inf")
    passing: bool = False


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports", []):
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"probe port {port!r} is not a named port of container {container['name']}")


def run_probe(probe: Mapping[str, Any], pod_ip: str, container: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            host = get.get("host") or pod_ip
            url = f"{get.get('scheme', 'HTTP').lower()}://{host}:{resolve_port(get['port'], container)}"
            url += get.get("path", "/")
            headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
                return 200 <= r.status < 400
        if "tcpSocket" in probe:
            port = resolve_port(probe["tcpSocket"]["port"], container)
            with socket.create_connection((probe["tcpSocket"].get("host") or pod_ip, port), timeout=timeout):
                return True
        if "exec" in probe:
            done = subprocess.run(probe["exec"]["command"], env=dict(env), timeout=timeout, check=False,
                                  capture_output=True)
            return done.returncode == 0
    except (OSError, urllib.error.URLError, subprocess.TimeoutExpired, ValueError):
        return False
    return False


def step(probe: Mapping[str, Any], state: ProbeState, now: float, started_at: float, pod_ip: str,
         container: Mapping[str, Any], env: Mapping[str, str]) -> ProbeState:
    """Run the probe if its period has come; return the updated consecutive counts."""
    if now - started_at < float(probe.get("initialDelaySeconds", 0)):
        return state
    if now - state.last_run < float(probe.get("periodSeconds", 10)):
        return state
    ok = run_probe(probe, pod_ip, container, env)
    successes, failures = (state.successes + 1, 0) if ok else (0, state.failures + 1)
    passing = state.passing
    if successes >= int(probe.get("successThreshold", 1)):
        passing = True
    if failures >= int(probe.get("failureThreshold", 3)):
        passing = False
    return ProbeState(successes=successes, failures=failures, last_run=now, passing=passing)
