"""What the scale benchmark reads at the edges of a window: the operator's RSS and reconcile
histogram, Prometheus's own request counter, and the apiserver's audit log."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

RECONCILE_HISTOGRAM = "tide_operator_reconcile_duration_seconds"
QUERY_HANDLER = "/api/v1/query"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# Kopf's own client names itself kopf/<version>; the passes use the kubernetes client.
KOPF_AGENT = "kopf/"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class PeakRss:
    """Samples a process's VmRSS every ``period_s`` while running; ``peak`` is the largest seen."""

    def __init__(self, pid: int, period_s: float = 1.0) -> None:
        self.pid, self.period_s, self.peak = pid, period_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mib(self.pid))
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def reconcile_buckets(metrics_text: str) -> list[tuple[float, float]]:
    """The reconcile histogram's cumulative (upper bound, count) buckets, +Inf included."""
    out = []
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == f"{RECONCILE_HISTOGRAM}_bucket":
                out.append((float(sample.labels["le"]), sample.value))
    return sorted(out)


def instant_queries(metrics_text: str) -> float:
    """Prometheus's count of requests its instant-query handler answered (all status codes)."""
    return sum(sample.value for family in text_string_to_metric_families(metrics_text)
               for sample in family.samples
               if sample.name == "prometheus_http_requests_total" and sample.labels.get("handler") == QUERY_HANDLER)


@dataclass(frozen=True)
class ApiCounts:
    gets: int
    writes: int
    lists: int  # by the passes (the kubernetes client)
    relists: int  # by Kopf's watch machinery
    by_call: Counter[str]  # "verb resource (agent)" -> count, for the log


def count_calls(audit_log: Path, user: str, since: int, until: int) -> ApiCounts:
    """The user's completed requests logged between two byte offsets; a watch is logged when it
    closes, so watches are left out (their LIST at start is counted: a re-list)."""
    with open(audit_log, "rb") as f:
        f.seek(since)
        chunk = f.read(until - since).decode(errors="replace")
    verbs: Counter[str] = Counter()
    by_call: Counter[str] = Counter()
    for line in chunk.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by a mark taken while the apiserver wrote it (or empty)
        if event.get("stage") != "ResponseComplete" or event.get("user", {}).get("username") != user:
            continue
        verb, ref = event.get("verb", ""), event.get("objectRef") or {}
        kopf = str(event.get("userAgent", "")).startswith(KOPF_AGENT)
        kind = "relist" if verb == "list" and kopf else "write" if verb in WRITE_VERBS else verb
        verbs[kind] += 1
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        by_call[f"{verb} {resource} ({'kopf' if kopf else 'pass'})"] += 1
    return ApiCounts(gets=verbs["get"], writes=verbs["write"], lists=verbs["list"], relists=verbs["relist"],
                     by_call=by_call)


def audit_mark(audit_log: Path) -> int:
    return audit_log.stat().st_size if audit_log.exists() else 0
