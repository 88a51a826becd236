"""Start daemons in their own process groups and stop exactly those, by recorded pid.

A pid alone can be recycled after a crash, so each record also keeps the process start time
from /proc; `stop` refuses to signal a pid whose start time no longer matches.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    start_ticks: int
    log: str


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime); the command name in field 2 may contain spaces, so split after ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_alive(record: ProcessRecord) -> bool:
    return _start_ticks(record.pid) == record.start_ticks


def spawn(name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> ProcessRecord:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    ticks = _start_ticks(proc.pid)
    if ticks is None:
        raise RuntimeError(f"{name} exited at once; see {log_path}")
    return ProcessRecord(name=name, pid=proc.pid, start_ticks=ticks, log=str(log_path))


def stop(record: ProcessRecord, grace_seconds: float = 10.0, leader_only: bool = False) -> None:
    """SIGTERM the whole process group, SIGKILL what is left after the grace period.

    ``leader_only``: as a container runtime stops a container, SIGTERM goes to its main process alone
    (it shuts its own children down: vLLM drains, then stops its engine), and whatever is left of the
    group is killed once that process exits or the grace period ends."""
    if not is_alive(record):
        return
    if leader_only:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
    else:
        _signal_group(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not is_alive(record):
            if leader_only:
                _signal_group(record.pid, signal.SIGKILL)
            return
        time.sleep(0.1)
    _signal_group(record.pid, signal.SIGKILL)
    _reap(record.pid)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _reap(pid: int) -> None:
    # Not our child (started by an earlier `up`)? Then there is nothing to reap.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


class ProcessTable:
    """The pids one plane started, persisted so `down` from another process finds them."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[ProcessRecord]:
        if not self.path.is_file():
            return []
        return [ProcessRecord(**r) for r in json.loads(self.path.read_text())]

    def add(self, record: ProcessRecord) -> None:
        records = [*self.load(), record]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in records], indent=1))
        tmp.replace(self.path)

    def remove(self, pid: int) -> None:
        records = [r for r in self.load() if r.pid != pid]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in records], indent=1))
        tmp.replace(self.path)

    def replace(self, pid: int, record: ProcessRecord) -> None:
        """A restarted process takes the old one's place, so `stop_all` keeps the start order."""
        records = [record if r.pid == pid else r for r in self.load()]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in records], indent=1))
        tmp.replace(self.path)

    def stop_all(self) -> None:
        # Reverse start order: the agent and controllers go before the apiserver and etcd.
        for record in reversed(self.load()):
            stop(record)
        self.path.unlink(missing_ok=True)
