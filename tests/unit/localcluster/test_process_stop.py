"""How the local kubelet stops a container: SIGTERM to its main process alone (as a container runtime
does), and whatever is left of its process group killed once that process has exited."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tide_localcluster.processes import spawn, stop

# A main process that starts a child, then on SIGTERM notes it and exits; the child notes a SIGTERM too.
MAIN = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print("child", child.pid, flush=True)
def term(*_):
    print("main got TERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
time.sleep(60)
"""
CHILD = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("child got TERM", flush=True), sys.exit(0)))
time.sleep(60)
"""


def _child_pid(log: Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("child "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise AssertionError(f"no child started: {log.read_text()}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return status == "Z"  # exited, not yet reaped by its parent


def test_the_main_process_alone_gets_sigterm_and_the_rest_is_killed_after_it(tmp_path: Path) -> None:
    record = spawn("pod", [sys.executable, "-c", MAIN, CHILD], tmp_path)
    child = _child_pid(Path(record.log))
    time.sleep(0.5)  # the child's handler is installed
    stop(record, grace_seconds=10, leader_only=True)
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    log = Path(record.log).read_text()
    assert "main got TERM" in log
    assert "child got TERM" not in log  # killed with the group, never signalled on its own
    assert _gone(child)


def test_a_plane_component_gets_sigterm_with_its_whole_group(tmp_path: Path) -> None:
    record = spawn("daemon", [sys.executable, "-c", MAIN, CHILD], tmp_path)
    _child_pid(Path(record.log))
    time.sleep(0.5)
    stop(record, grace_seconds=10)
    time.sleep(0.5)
    assert "child got TERM" in Path(record.log).read_text()
