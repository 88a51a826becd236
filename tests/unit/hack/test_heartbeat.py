"""hack/lib/progress.sh: a long silent step still prints a line every TIDE_HEARTBEAT_SECONDS, its output
goes to its log, and its exit status is the step's (issue 19: `make demo` was silent for ten minutes)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

LIB = Path(__file__).resolve().parents[3] / "hack" / "lib" / "progress.sh"
INTERVAL = 1
TOLERANCE = 0.8  # seconds: a loaded 2-core CI machine delays a `sleep` wakeup by a fraction of a second


def run_step(script: str, log: Path, interval: int = INTERVAL) -> tuple[int, list[tuple[float, str]]]:
    """Source the library, run `run_with_heartbeat` on `script` and time-stamp every line it prints."""
    command = f'source "{LIB}"; run_with_heartbeat demo-step "{log}" bash -c \'{script}\''
    proc = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={"PATH": "/usr/bin:/bin", "TIDE_HEARTBEAT_SECONDS": str(interval)})
    t0, lines = time.monotonic(), []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    rc = proc.wait()
    return rc, [*lines, (time.monotonic() - t0, "<exit>")]


def test_a_silent_step_gets_a_heartbeat_line_every_interval(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    rc, lines = run_step("echo compiling part 1; sleep 4.5; echo compiling part 2", log)
    assert rc == 0
    heartbeats = [text for _, text in lines if text.startswith("  ... demo-step ")]
    assert len(heartbeats) >= 3, lines
    # the heartbeat names the step, its elapsed seconds and the last line its log had
    assert re.fullmatch(r"  \.\.\. demo-step \d+s: compiling part 1", heartbeats[0]), heartbeats
    times = [0.0] + [at for at, _ in lines]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) <= INTERVAL + TOLERANCE, lines
    # the step's output went to its log, not to the terminal
    assert log.read_text() == "compiling part 1\ncompiling part 2\n"
    assert not any("compiling part 2" in text for _, text in lines)


def test_the_step_exit_status_propagates(tmp_path: Path) -> None:
    rc, lines = run_step("echo boom >&2; sleep 1.5; exit 7", tmp_path / "fail.log")
    assert rc == 7, lines
    assert (tmp_path / "fail.log").read_text() == "boom\n"  # stderr goes to the log too


def test_a_quick_step_prints_nothing_and_returns_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    rc, lines = run_step("echo done", tmp_path / "quick.log", interval=30)
    assert rc == 0
    assert [text for _, text in lines] == ["<exit>"]  # the ticker's pending sleep does not hold the pipe
    assert time.monotonic() - started < 5


def test_the_log_is_appended_to(tmp_path: Path) -> None:
    log = tmp_path / "append.log"
    log.write_text("earlier step\n")
    rc, _ = run_step("echo later step", log)
    assert rc == 0
    assert log.read_text() == "earlier step\nlater step\n"
