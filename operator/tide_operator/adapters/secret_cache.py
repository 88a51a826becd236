"""The Secrets a spec references (S3 and Prometheus credentials), read with one GET and kept in memory.

Without it every pass of every TideDeployment read its credentials again: two GETs per pass, growing
with N. Secrets are never listed or watched (that would need list/watch on every Secret in scope,
issue 9's least privilege), so a change is noticed in two ways:

- **refused**: an S3 or Prometheus answer 401/403 to a credential drops every kept Secret that holds
  it (`forget_holding`), so the next pass reads the rotated keys at once;
- **age**: an entry older than ``max_age_s`` is read again, so a rotation whose old key still works,
  or a deleted Secret, is seen within that bound (0: read on every pass, the old behaviour).

A missing Secret is never kept: the pass that follows its creation uses it. Keys are (namespace,
name), so one tenant's entry never answers another's. The control token's Secret is not here: it is
our child, read with the other children each pass so a hand-deleted one is recreated at once.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

DEFAULT_MAX_AGE_S = 300.0
Data = Mapping[str, str]  # a Secret's data as the API returns it (base64 values)


@dataclass(frozen=True)
class _Entry:
    data: Data
    read_at: float


class SecretCache:
    def __init__(self, max_age_s: float = DEFAULT_MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s, self._clock = max_age_s, clock
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()

    def get(self, namespace: str, name: str, read: Callable[[], Data | None]) -> Data | None:
        """The kept data if young enough, else ``read()`` (None: the Secret does not exist)."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get((namespace, name))
            if entry is not None and now - entry.read_at < self.max_age_s:
                return entry.data
        data = read()  # outside the lock: a slow API server must not stall other deployments' passes
        with self._lock:
            if data is None:
                self._entries.pop((namespace, name), None)
            else:
                self._entries[(namespace, name)] = _Entry(dict(data), now)
            self._drop_expired(now)
        return data

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._entries.pop((namespace, name), None)

    def forget_holding(self, values: Iterable[str]) -> int:
        """Drop every kept Secret holding one of ``values`` (a refused key, token or password)."""
        refused = {v for v in values if v}
        if not refused:
            return 0
        with self._lock:
            stale = [key for key, entry in self._entries.items() if refused & set(_decoded(entry.data))]
            for key in stale:
                del self._entries[key]
        return len(stale)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _drop_expired(self, now: float) -> None:
        """Entries past their age are dead weight (the next read replaces them): a deleted
        TideDeployment's Secret must not stay in memory for the operator's lifetime."""
        for key in [k for k, e in self._entries.items() if now - e.read_at >= self.max_age_s]:
            del self._entries[key]


def _decoded(data: Data) -> Iterable[str]:
    for value in data.values():
        try:
            text = base64.b64decode(value).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        yield from (text, text.strip())  # a token is used stripped (prometheus_access.auth_from_secret)


SECRETS = SecretCache()
