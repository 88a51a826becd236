"""Progress lines for the tiny models' builds, minutes of CPU training in which a silent terminal looks hung.

A line is due at the first and the last step and whenever TIDE_HEARTBEAT_SECONDS (default 20, the same
variable as hack/lib/progress.sh) passed since the previous one, so the gap stays under 30 s however
slow the machine; it carries the step, the share done, a caller's detail (the loss), elapsed and ETA.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
HEARTBEAT_ENV = "TIDE_HEARTBEAT_SECONDS"
DEFAULT_HEARTBEAT_S = 20.0


def heartbeat_seconds() -> float:
    raw = os.environ.get(HEARTBEAT_ENV, str(DEFAULT_HEARTBEAT_S))
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{HEARTBEAT_ENV}={raw!r}: expected seconds between progress lines") from None
    if seconds < 0:
        raise ValueError(f"{HEARTBEAT_ENV}={raw!r}: must not be negative")
    return seconds


class Progress:
    """Counts `total` units of work from construction; `due` says when a line is owed, `report` writes it."""

    def __init__(self, what: str, total: int, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, emit: Callable[[str], None] = log.info) -> None:
        self.what, self.total, self.clock, self.emit = what, total, clock, emit
        self.every_s = heartbeat_seconds() if every_s is None else every_s
        self.started = clock()
        self.last: float | None = None

    def due(self, done: int) -> bool:
        return self.last is None or done >= self.total or self.clock() - self.last >= self.every_s

    def report(self, done: int, detail: str = "") -> None:
        now = self.clock()
        self.last = now
        elapsed = now - self.started
        line = f"{self.what} {done}/{self.total} ({100 * done / self.total:.0f}%)"
        line += f" {detail}" if detail else ""
        line += f", {elapsed:.0f}s elapsed"
        if 0 < done < self.total:
            line += f", eta {elapsed / done * (self.total - done):.0f}s"
        self.emit(line)
