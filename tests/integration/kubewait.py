"""Polling helpers for integration tests: wait for a condition on the real API, fail with what was seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 60.0, interval_s: float = 0.3) -> T:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last  # type: ignore[return-value]
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last seen: {last!r}")


def events_where(kube: Any, namespace: str, holds: Callable[[list[Any]], bool], what: str,
                 selector: str = "", timeout_s: float = 30.0) -> list[Any]:
    """The namespace's Events (matching ``selector``) once ``holds`` them. Kopf posts a handler's Events from
    a background queue after the pass, so they can trail the status or pods the test waited for."""
    from kubernetes import client

    found: list[list[Any]] = [[]]

    def probe() -> list[Any] | None:
        found[0] = client.CoreV1Api(kube).list_namespaced_event(namespace, field_selector=selector).items
        return found[0] if holds(found[0]) else None

    try:
        wait_for(probe, what, timeout_s=timeout_s)
    except AssertionError as timed_out:
        seen = [(e.involved_object.name, e.reason, e.message) for e in found[0]]
        raise AssertionError(f"{timed_out}; Events seen: {seen}") from None
    return found[0]
