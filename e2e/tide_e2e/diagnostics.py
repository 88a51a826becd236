"""What a stalled whole-loop run prints: the lines of a log that say something, one pod's state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_ACCESS_LOG = ("\"GET /metrics", "\"GET /health", "\"POST /v1/completions", "\"GET /tide/", "InsecureRequestWarning",
               "warnings.warn(")


def telling_lines(log: Path, n: int, keep: tuple[str, ...] = ()) -> list[str]:
    """The last n lines of a log that say something: access lines dropped, or only lines with a keep word."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as err:
        return [f"(unreadable: {err})"]
    if keep:
        lines = [line for line in lines if any(k in line for k in keep)]
    else:
        lines = [line for line in lines if not any(a in line for a in _ACCESS_LOG)]
    return [line[:300] for line in lines[-n:]]


def pod_line(pod: Any) -> str:
    """One pod's state as kubectl describe would sum it up: phase, readiness, restarts, why it last stopped."""
    st = pod.status
    ready = next((c.status for c in st.conditions or [] if c.type == "Ready"), "?")
    parts = [f"{pod.metadata.name}: {st.phase} ready={ready}"]
    if pod.metadata.deletion_timestamp:
        parts.append("terminating")
    for c in st.container_statuses or []:
        parts.append(f"{c.name} restarts={c.restart_count}")
        if c.state and c.state.waiting:
            parts.append(f"waiting {c.state.waiting.reason}: {(c.state.waiting.message or '')[:80]}")
        last = c.last_state.terminated if c.last_state else None
        if last:
            parts.append(f"last exit {last.exit_code} ({last.reason}) at {last.finished_at}")
    return " ".join(parts)
