"""Requests in flight on one vLLM pod, read from its own /metrics (the drain of lent pods).

Prometheus answers over its scrape interval and rate window; a drain waits on the pod itself. The
gauges are vLLM's (the simulator speaks the same names): running plus waiting, summed over engines.
"""

from __future__ import annotations

import urllib.request

IN_FLIGHT_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
MAX_METRICS_BYTES = 4 * 1024 * 1024  # a vLLM /metrics page is tens of KiB


def requests_in_flight(pod_ip: str, port: int, timeout_s: float = 3.0) -> int | None:
    """Running plus waiting requests, or None when the pod does not answer (the drain then waits
    for its bound rather than delete a pod that may still serve)."""
    if not pod_ip:
        return None
    try:
        with urllib.request.urlopen(f"http://{pod_ip}:{port}/metrics", timeout=timeout_s) as answer:
            text = answer.read(MAX_METRICS_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    return in_flight(text)


def in_flight(text: str) -> int | None:
    """The sum of the in-flight gauges in a Prometheus text page; None when neither is there."""
    total, seen = 0.0, False
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in IN_FLIGHT_GAUGES:
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            seen = True
    return round(total) if seen else None
