"""A stalled whole-loop run prints what matters: log lines beyond access logs, and each pod's state."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client

from tide_e2e.diagnostics import pod_line, telling_lines


def test_access_lines_are_dropped_and_keep_words_select(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text('INFO: 127.0.0.1 - "GET /metrics HTTP/1.1" 200 OK\n'
                   "ERROR EngineCore died\n"
                   'INFO: 127.0.0.1 - "POST /v1/completions HTTP/1.1" 200 OK\n'
                   "WARNING slow step\n")
    assert telling_lines(log, 30) == ["ERROR EngineCore died", "WARNING slow step"]
    assert telling_lines(log, 1) == ["WARNING slow step"]
    assert telling_lines(log, 30, keep=("ERROR",)) == ["ERROR EngineCore died"]
    assert telling_lines(tmp_path / "missing.log", 30)[0].startswith("(unreadable:")


def test_a_pod_line_says_readiness_restarts_and_the_last_exit() -> None:
    finished = datetime(2026, 12, 3, 0, 7, 2, tzinfo=UTC)
    container = client.V1ContainerStatus(
        name="vllm", image="vllm", image_id="", ready=False, restart_count=2,
        state=client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="CrashLoopBackOff",
                                                                             message="back-off")),
        last_state=client.V1ContainerState(terminated=client.V1ContainerStateTerminated(
            exit_code=137, reason="Error", finished_at=finished)))
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="chat-vllm-1"), status=client.V1PodStatus(
        phase="Running", conditions=[client.V1PodCondition(type="Ready", status="False")],
        container_statuses=[container]))
    line = pod_line(pod)
    assert line.startswith("chat-vllm-1: Running ready=False vllm restarts=2")
    assert "waiting CrashLoopBackOff: back-off" in line
    assert "last exit 137 (Error)" in line
