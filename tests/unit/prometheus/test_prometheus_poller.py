"""The per-slot poller: its schedule, and an adapter whose passes read from memory while it runs."""

from __future__ import annotations

import time

import pytest
from test_prometheus_adapter_unit import LLAMA, QWEN, _adapter

from tide_operator.adapters.prometheus_adapter import (
    AdapterConfig,
    PrometheusAdapter,
    PrometheusAdapters,
    PrometheusUnavailable,
)
from tide_operator.adapters.prometheus_adapter_queries import Metric
from tide_operator.adapters.prometheus_poller import idle_limit, next_tick
from tide_operator.control.prometheus_access import PrometheusConnection

Q = len(Metric)


@pytest.mark.parametrize(("previous", "now", "expected"), [
    (100.0, 100.0, 110.0),  # fetched instantly: the next tick
    (100.0, 109.9, 110.0),  # a slow fetch that still made it
    (100.0, 110.0, 120.0),  # overran to the tick itself: skip it, no immediate refetch
    (100.0, 135.0, 140.0),  # overran three ticks: the next future one, not a burst of three
    (100.0, 99.0, 110.0),   # clock read before the tick (early wake): still the next tick
])
def test_next_tick_stays_on_the_grid_and_never_bursts(previous: float, now: float, expected: float) -> None:
    assert next_tick(previous, 10.0, now) == pytest.approx(expected)


def test_next_tick_rejects_a_zero_interval() -> None:
    with pytest.raises(ValueError):
        next_tick(0.0, 0.0, 1.0)


def test_idle_limit_is_a_few_intervals_and_at_least_three_minutes() -> None:
    assert idle_limit(10.0) == 180.0
    assert idle_limit(120.0) == 360.0


def test_passes_read_from_memory_whatever_their_phase_while_the_poller_runs() -> None:
    adapter, fake, clock = _adapter(poll=True)
    try:
        adapter.deployment(LLAMA)  # first read: synchronous, starts the poller
        assert adapter.polling
        for step in (3, 7, 9, 11):  # passes at scattered moments, past one interval: no query of theirs
            clock.now = 1000 + step
            adapter.deployment(QWEN)
        assert len(fake.calls) == Q
        for tick in (1010, 1020, 1030):  # the poller's ticks are the only queries
            clock.now = tick
            assert adapter.refresh()
            clock.now += 4
            adapter.deployment(LLAMA)
        assert len(fake.calls) == 4 * Q
        assert sorted({at for _, at in fake.calls}) == [1000, 1010, 1020, 1030]
    finally:
        adapter.close()


def test_a_stale_snapshot_is_fetched_by_the_pass_when_the_poller_falls_behind() -> None:
    adapter, fake, clock = _adapter(poll=True)
    try:
        adapter.deployment(LLAMA)
        clock.now += 2 * 10 + 5  # two ticks and a timeout without a refresh
        adapter.deployment(LLAMA)
        assert len(fake.calls) == 2 * Q
    finally:
        adapter.close()


def test_a_dead_endpoint_is_queried_once_per_tick_and_recovery_shows_at_the_next() -> None:
    adapter, fake, clock = _adapter(poll=True)
    try:
        adapter.deployment(LLAMA)
        fake.down = True
        clock.now = 1010
        assert adapter.refresh()
        for _ in range(5):  # every deployment's pass sees the failure without querying
            with pytest.raises(PrometheusUnavailable, match="connection refused"):
                adapter.deployment(QWEN)
        assert len(fake.calls) == Q + 1
        fake.down = False
        clock.now = 1020
        assert adapter.refresh()
        assert adapter.deployment(LLAMA) is not None
    finally:
        adapter.close()


def test_the_poller_stops_when_nobody_reads_and_after_close() -> None:
    adapter, fake, clock = _adapter(poll=True)
    adapter.deployment(LLAMA)
    clock.now += idle_limit(10) + 1
    assert not adapter.refresh()  # idle: the tick answers stop, without a query
    assert len(fake.calls) == Q
    adapter.close()
    assert not adapter.polling
    assert not adapter.refresh()


def test_a_real_poller_refreshes_on_its_own_and_ends_when_idle() -> None:
    calls: list[float] = []

    def query(promql: str, at: float) -> list[dict[str, object]]:
        calls.append(at)
        return []

    config = AdapterConfig(interval_s=0.05, timeout_s=0.05, poll_idle_s=0.5)
    adapter = PrometheusAdapter("http://prom", config, query=query)
    adapter.snapshot()
    poller = adapter._poller
    assert poller is not None
    deadline = time.monotonic() + 10
    while len(calls) < 3 * Q and time.monotonic() < deadline:  # refreshes without any read
        time.sleep(0.02)
    assert len(calls) >= 3 * Q
    assert poller.join(10), "the poller of a slot nobody reads must end"
    assert not adapter.polling
    settled = len(calls)
    time.sleep(0.2)
    assert len(calls) == settled
    adapter.snapshot()  # a later read starts it again
    assert adapter.polling
    adapter.close()
    assert adapter._poller is None
    assert poller.join(10)


def test_a_rotated_slot_closes_the_old_adapter() -> None:
    adapters = PrometheusAdapters(factory=lambda c, cfg: PrometheusAdapter(c, cfg, query=lambda q, t: []))
    old = adapters.for_connection(PrometheusConnection("https://p", credentials_owner="team-a/prom"))
    old.snapshot()
    assert old.polling
    from tide_operator.control.prometheus_access import PrometheusAuth
    new = adapters.for_connection(PrometheusConnection("https://p", PrometheusAuth(token="t2"),
                                                       credentials_owner="team-a/prom"))
    assert new is not old
    assert not old.polling
    new.close()
