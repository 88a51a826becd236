"""Faults a real cluster has, injected into a running local plane.

- a component restarted (kube-apiserver, etcd, Prometheus): stopped, then started again from its
  own command line (read from /proc before it stops), so it comes back on the same port, with the
  same certificates and the same data directory, and keeps its place in the plane's process table;
- a node lost: named in <state>/faults/lost-nodes.json, which the node agent reads on every beat.
  It stops renewing that node's Lease and Ready heartbeat and kills its pods' processes without
  reporting anything, as a machine that lost power would; the controller-manager then marks the
  node unreachable and, after the pods' toleration, evicts them;
- a pod's container crashed: its process group SIGKILLed; the kubelet restarts it as usual.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tide_localcluster.processes import ProcessRecord, ProcessTable, is_alive, spawn, stop

if TYPE_CHECKING:
    from tide_localcluster.plane import PlaneInfo

RESTART_TIMEOUT_S = 90.0
LOST_NODES_FILE = Path("faults") / "lost-nodes.json"


class FaultError(RuntimeError):
    """A fault could not be injected (nothing to restart, no such pod process)."""


def parse_cmdline(raw: bytes) -> list[str]:
    """/proc/<pid>/cmdline: arguments separated (and ended) by NUL bytes."""
    args = raw.split(b"\0")
    if args and args[-1] == b"":
        args.pop()
    if not args:
        raise FaultError("empty command line (a zombie or a kernel thread)")
    return [a.decode() for a in args]


def find_record(records: Iterable[ProcessRecord], name: str) -> ProcessRecord:
    matches = [r for r in records if r.name == name]
    if len(matches) != 1:
        raise FaultError(f"expected one process named {name!r} in the plane, found {len(matches)}")
    return matches[0]


def restart_component(state_dir: Path, name: str, ready: Callable[[], bool],
                      while_down: Callable[[], None] | None = None, timeout_s: float = RESTART_TIMEOUT_S) -> float:
    """Stop the plane's process ``name`` and start it again with the same arguments and environment.

    ``while_down`` runs between the stop and the start (e.g. to wait until a client noticed the
    outage). Waits until ``ready()`` holds; returns the seconds from the stop until then.
    """
    table = ProcessTable(state_dir / "pids.json")
    old = find_record(table.load(), name)
    if not is_alive(old):
        raise FaultError(f"{name} (pid {old.pid}) is not running")
    argv = parse_cmdline(Path(f"/proc/{old.pid}/cmdline").read_bytes())
    env, cwd = _environ(old.pid), Path(os.readlink(f"/proc/{old.pid}/cwd"))
    started = time.monotonic()
    stop(old)
    if while_down is not None:
        while_down()
    new = spawn(name, argv, Path(old.log).parent, env=env, cwd=cwd)
    table.replace(old.pid, new)
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return time.monotonic() - started
        if not is_alive(new):
            raise FaultError(f"{name} exited after its restart; see {new.log}")
        time.sleep(0.3)
    raise TimeoutError(f"{name} not ready {timeout_s:.0f}s after its restart; see {new.log}")


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None  # not ours to read: the caller's environment then
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def answers(url: str, token: str | None = None) -> bool:
    """GET ``url`` answers 200 (loopback, self-signed certificate accepted)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2,
                                    context=context if url.startswith("https") else None) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def restart_apiserver(info: PlaneInfo) -> float:
    """Same port, certificates, tokens and etcd; returns the seconds until /readyz answers again."""
    return restart_component(Path(info.state_dir), "kube-apiserver", lambda: apiserver_ready(info))


def apiserver_ready(info: PlaneInfo) -> bool:
    return answers(f"{info.server}/readyz", info.token)


def restart_etcd(info: PlaneInfo) -> float:
    """Same data directory and ports; returns the seconds until the apiserver is ready again."""
    started = time.monotonic()
    restart_component(Path(info.state_dir), "etcd", lambda: answers(f"http://127.0.0.1:{info.etcd_port}/health"))
    _wait(lambda: apiserver_ready(info), "kube-apiserver /readyz after the etcd restart")
    return time.monotonic() - started


def restart_prometheus(info: PlaneInfo, while_down: Callable[[], None] | None = None) -> float:
    """Same port, configuration and TSDB directory; returns the seconds until /-/ready answers again."""
    return restart_component(Path(info.state_dir), "prometheus", lambda: answers(f"{info.prometheus_url}/-/ready"),
                             while_down)


def _wait(holds: Callable[[], bool], what: str, timeout_s: float = RESTART_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not holds():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:.0f}s")
        time.sleep(0.3)


# --- lost nodes ---

def lost_nodes(state_dir: Path) -> frozenset[str]:
    """The nodes currently lost; none when the file is absent. A malformed file is an error."""
    path = state_dir / LOST_NODES_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise FaultError(f"{path}: must be a JSON list of node names")
    return frozenset(raw)


def _write_lost(state_dir: Path, nodes: frozenset[str]) -> None:
    path = state_dir / LOST_NODES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(nodes)))
    tmp.replace(path)  # the agent never reads half a file


def lose_node(state_dir: Path, node: str) -> None:
    _write_lost(state_dir, lost_nodes(state_dir) | {node})


def restore_node(state_dir: Path, node: str) -> None:
    _write_lost(state_dir, lost_nodes(state_dir) - {node})


NODE_PROBLEM_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def node_problems(node: dict) -> list[str]:
    """What keeps a Node (as the API returns it, camelCase) from being healthy: not Ready, tainted."""
    status, spec = node.get("status") or {}, node.get("spec") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    problems = [] if ready and ready.get("status") == "True" else [f"Ready={ready.get('status') if ready else None}"]
    problems += [f"taint {t['key']}:{t.get('effect')}" for t in spec.get("taints") or []
                 if t.get("key") in NODE_PROBLEM_TAINTS]
    return problems


# --- a crashed container ---

def pod_process_records(records: Iterable[ProcessRecord], namespace: str, pod: str,
                        container: str | None = None) -> list[ProcessRecord]:
    """The kubelet's records of a pod's container processes (named pod-<namespace>-<pod>-<container>)."""
    prefix = f"pod-{namespace}-{pod}-"
    return [r for r in records if r.name.startswith(prefix)
            and (container is None or r.name == prefix + container)]


def kill_pod_process(state_dir: Path, namespace: str, pod: str, container: str | None = None) -> list[int]:
    """SIGKILL a pod's container processes (their whole groups), as a crash; returns the pids."""
    records = pod_process_records(ProcessTable(state_dir / "pod-processes.json").load(), namespace, pod, container)
    live = [r for r in records if is_alive(r)]
    if not live:
        raise FaultError(f"no running container process of pod {namespace}/{pod}")
    for record in live:
        with contextlib.suppress(ProcessLookupError):  # exited on its own meanwhile
            os.killpg(record.pid, signal.SIGKILL)
    return [r.pid for r in live]


def socket_inode(proc_net_tcp: str, local_port: int, remote_port: int) -> int | None:
    """The inode of the established loopback TCP socket local_port -> remote_port (/proc/net/tcp text)."""
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != "01":  # 01: ESTABLISHED
            continue
        if int(fields[1].rsplit(":", 1)[1], 16) == local_port and int(fields[2].rsplit(":", 1)[1], 16) == remote_port:
            return int(fields[9])
    return None


def pod_with_connection(state_dir: Path, namespace: str, pods: Iterable[str], local_port: int,
                        remote_port: int) -> str | None:
    """Which of ``pods`` holds the client end (``local_port``) of a connection to ``remote_port``."""
    inode = socket_inode(Path("/proc/net/tcp").read_text(), local_port, remote_port)
    if inode is None:
        return None
    records = ProcessTable(state_dir / "pod-processes.json").load()
    for pod in pods:
        for record in pod_process_records(records, namespace, pod):
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) == f"socket:[{inode}]" for fd in Path(f"/proc/{record.pid}/fd").iterdir()):
                    return pod
    return None


# --- the report the fault tests print ---

@dataclass(frozen=True)
class FaultRow:
    fault: str
    survived: bool
    nothing_lost: bool


def fault_table(rows: Iterable[FaultRow]) -> list[str]:
    """`fault | survived | nothing lost`, one line per fault, columns aligned."""
    body = [(r.fault, "yes" if r.survived else "no", "yes" if r.nothing_lost else "no") for r in rows]
    header = ("fault", "survived", "nothing lost")
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(3)]
    return [" | ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()
            for cells in [header, *body]]
