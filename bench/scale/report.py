"""Pure arithmetic of the scale benchmark: quantiles from histogram buckets, per-pass rates, the
table with the growth per deployment, and the issue's targets (issue 18) as ``check``.

A quantile is estimated as Prometheus's histogram_quantile does: find the bucket holding the
rank q * count and interpolate linearly between its lower and upper bound (the first bucket's
lower bound is 0); a rank in the +Inf bucket answers the largest finite bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

RSS_TARGET_MIB = 200.0
P99_TARGET_S = 2.0
# "Flat in N" / "independent of N": the largest size may exceed the smallest by this factor plus
# this slack (a pass that flips speculation writes a status and an Event more than a quiet one).
FLAT_FACTOR, FLAT_SLACK = 1.25, 0.5


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """q-quantile from cumulative ``(upper bound, count)`` buckets, +Inf last; None without observations."""
    if not 0 <= q <= 1:
        raise ValueError(f"q: {q} is not in [0, 1]")
    ordered = sorted(buckets)
    if not ordered or not math.isinf(ordered[-1][0]) or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for upper, cumulative in ordered:
        if cumulative >= rank and cumulative > below:
            if math.isinf(upper):
                return lower  # the largest finite bound, as histogram_quantile answers
            return lower + (upper - lower) * (rank - below) / (cumulative - below)
        lower, below = upper, cumulative
    return lower


def bucket_delta(after: Sequence[tuple[float, float]], before: Sequence[tuple[float, float]]
                 ) -> list[tuple[float, float]]:
    """The window's own histogram: cumulative counts at its end minus those at its start."""
    start = dict(before)
    return [(bound, count - start.get(bound, 0.0)) for bound, count in sorted(after)]


@dataclass(frozen=True)
class Measurement:
    """What one steady window at one size saw."""

    size: int  # TideDeployments
    with_pods: int  # of which serve one simulator pod each
    window_s: float
    prometheus_interval_s: float
    passes: int  # reconcile passes finished in the window (the histogram's count)
    rss_mib: float  # the operator's largest VmRSS in the window
    gets: int  # API requests of the operator's user in the window, by kind
    writes: int
    lists: int  # lists the passes made (not Kopf's watch machinery)
    relists: int  # lists Kopf made to (re)start its watches
    promql_queries: int  # instant queries Prometheus answered in the window
    p50_s: float | None
    p99_s: float | None

    def per_pass(self, count: int) -> float | None:
        return count / self.passes if self.passes else None

    @property
    def requests_per_pass(self) -> float | None:
        return self.per_pass(self.gets + self.writes + self.lists)

    @property
    def promql_per_interval(self) -> float:
        return self.promql_queries / (self.window_s / self.prometheus_interval_s)


COLUMNS = ("N", "pods", "passes", "RSS MiB", "get/pass", "write/pass", "list/pass", "re-lists",
           "PromQL/interval", "p50 s", "p99 s")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cells(m: Measurement) -> list[str]:
    return [str(m.size), str(m.with_pods), str(m.passes), _fmt(m.rss_mib, 1), _fmt(m.per_pass(m.gets)),
            _fmt(m.per_pass(m.writes)), _fmt(m.per_pass(m.lists)), str(m.relists),
            _fmt(m.promql_per_interval), _fmt(m.p50_s, 3), _fmt(m.p99_s, 3)]


def slope(a: float | None, b: float | None, n_a: int, n_b: int) -> float | None:
    """Growth per deployment from size n_a to n_b."""
    if a is None or b is None or n_a == n_b:
        return None
    return (b - a) / (n_b - n_a)


def _slope_cells(a: Measurement, b: Measurement) -> list[str]:
    def per(get: str) -> str:
        value = slope(getattr(a, get), getattr(b, get), a.size, b.size)
        return _fmt(value, 4)

    return [f"{a.size}->{b.size}", "", "", per("rss_mib"), "", "", "", "",
            per("promql_per_interval"), per("p50_s"), per("p99_s")]


def table(rows: Sequence[Measurement]) -> list[str]:
    """One line per size, then the growth per deployment between consecutive sizes."""
    ordered = sorted(rows, key=lambda m: m.size)
    grid = [list(COLUMNS), *(_cells(m) for m in ordered)]
    growth = [_slope_cells(a, b) for a, b in itertools.pairwise(ordered)]
    widths = [max(len(r[i]) for r in grid + growth) for i in range(len(COLUMNS))]

    def line(r: list[str]) -> str:
        return "  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True))

    lines = [line(r) for r in grid]
    if growth:
        lines += ["growth per deployment between sizes (slope):", *(line(r) for r in growth)]
    lines.append("requests per pass (get+write+list) by N: "
                 + ", ".join(f"{m.size}: {_fmt(m.requests_per_pass)}" for m in ordered))
    return lines


def _flat(small: float | None, large: float | None) -> bool:
    return small is not None and large is not None and large <= small * FLAT_FACTOR + FLAT_SLACK


def check(rows: Sequence[Measurement]) -> list[str]:
    """The targets missed at the largest size (issue 18); empty when every one holds."""
    if not rows:
        return ["no measurement"]
    ordered = sorted(rows, key=lambda m: m.size)
    small, large = ordered[0], ordered[-1]
    missed = []
    if large.rss_mib >= RSS_TARGET_MIB:
        missed.append(f"N={large.size}: operator RSS {large.rss_mib:.1f} MiB >= {RSS_TARGET_MIB:.0f} MiB")
    if large.passes == 0:
        missed.append(f"N={large.size}: no reconcile pass finished in the window")
    if large.lists:
        missed.append(f"N={large.size}: {large.lists} LIST calls inside steady-state passes (target 0)")
    if large.p99_s is None or large.p99_s >= P99_TARGET_S:
        missed.append(f"N={large.size}: p99 reconcile latency {_fmt(large.p99_s, 3)} s, target < {P99_TARGET_S} s")
    if len(ordered) > 1:
        if not _flat(small.promql_per_interval, large.promql_per_interval):
            missed.append(f"PromQL queries per interval grow with N: {small.promql_per_interval:.2f} at N="
                          f"{small.size}, {large.promql_per_interval:.2f} at N={large.size}")
        if not _flat(small.requests_per_pass, large.requests_per_pass):
            missed.append(f"requests per pass grow with N: {_fmt(small.requests_per_pass)} at N={small.size}, "
                          f"{_fmt(large.requests_per_pass)} at N={large.size}")
    return missed
