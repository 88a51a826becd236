"""A daemon thread that refreshes one Prometheus slot's snapshot on a fixed schedule.

The schedule is drift-free (tick k is first + k * interval_s) and never bursts: a refresh that
overran one or more ticks resumes at the next tick still in the future. The thread ends when its
`refresh` says the slot is idle (no pass read it for a while) or on `stop()`; the adapter starts a
new one at the next read.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


def next_tick(previous: float, interval_s: float, now: float) -> float:
    """The first tick of the schedule previous + k * interval_s (k >= 1) that is after ``now``."""
    if interval_s <= 0:
        raise ValueError("interval_s must be positive")
    tick = previous + interval_s
    if tick > now:
        return tick
    skipped = math.floor((now - previous) / interval_s) + 1  # ticks missed while a refresh overran
    return previous + skipped * interval_s


def idle_limit(interval_s: float) -> float:
    """How long a slot nobody reads keeps its poller: a few passes' worth, at least three minutes."""
    return 3 * max(interval_s, 60.0)


class SlotPoller:
    """Calls ``refresh()`` at every tick from ``first``; a False answer (the slot is idle) ends it."""

    def __init__(self, refresh: Callable[[], bool], interval_s: float, first: float, *,
                 clock: Callable[[], float] = time.time, name: str = "prometheus-poller") -> None:
        self._refresh = refresh
        self._interval_s = interval_s
        self._first = first
        self._clock = clock
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> SlotPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stopped.is_set()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        tick = self._first
        while not self._stopped.wait(max(0.0, tick - self._clock())):
            if not self._refresh():
                break
            tick = next_tick(tick, self._interval_s, self._clock())
        self._stopped.set()
