"""Retention that holds (control/retention.py): claims, protected shards, trainer deadlines. Table-driven."""

from __future__ import annotations

import pytest

from tide_contracts.registry import CaptureLimits, CaptureObject
from tide_operator.control.retention import (
    MAX_DEFAULT_TIMEOUT_S,
    MIN_DEFAULT_TIMEOUT_S,
    Claim,
    claim_window,
    claims_to_release,
    default_training_timeout_s,
    live_claims,
    measured_samples_per_second,
    protected_keys,
    prunable,
    training_timeout_s,
)

NOW = 1_000_000.0
RETENTION = 3600.0
INTERVAL = 60.0


def cap(name: str, age_s: float, samples: int = 10, size: int = 100) -> CaptureObject:
    return CaptureObject(f"p/captures/{name}", size, NOW - age_s, samples)


def claim(run: str, names: list[str], age_s: float = 0.0, timeout_s: float = 1800.0) -> Claim:
    created = NOW - age_s
    return Claim(run, frozenset(f"p/captures/{n}" for n in names), created, created + timeout_s)


BUFFER = [cap("old", 5000), cap("older", 7000), cap("fresh", 100), cap("mid", 3000)]


@pytest.mark.parametrize(("claims", "running", "live", "released"), [
    ([claim("r1", ["old"])], {"r1"}, ["r1"], []),
    ([claim("r1", ["old"], age_s=121)], set(), [], ["r1"]),  # run ended (succeeded, failed or deleted)
    ([claim("r1", ["old"], age_s=60)], set(), ["r1"], []),  # just written: its Job may not be seen yet
    ([claim("r1", ["old"], age_s=1801)], {"r1"}, [], ["r1"]),  # past the Job's deadline
    ([claim("r1", ["old"], age_s=1799)], {"r1"}, ["r1"], []),
    ([claim("r1", ["old"], age_s=300), claim("r2", ["mid"])], {"r2"}, ["r2"], ["r1"]),
    ([], {"r1"}, [], []),
])
def test_which_claims_hold(claims, running, live, released):
    assert [c.run_id for c in live_claims(claims, running, NOW)] == live
    assert claims_to_release(claims, running, NOW) == released


@pytest.mark.parametrize(("claims", "kept"), [
    ([], set()),
    ([claim("r1", ["old", "fresh"])], {"old", "fresh"}),
    # A claimed shard is kept only while younger than retention + timeout - interval.
    ([claim("r1", ["old"], timeout_s=5000 - RETENTION + INTERVAL + 1)], {"old"}),
    ([claim("r1", ["old"], timeout_s=5000 - RETENTION + INTERVAL)], set()),
    ([claim("r1", ["gone"])], set()),  # a key no longer listed
])
def test_which_shards_a_live_claim_protects(claims, kept):
    keys = protected_keys(BUFFER, claims, RETENTION, INTERVAL, NOW)
    assert {k.rsplit("/", 1)[1] for k in keys} == kept


LIMITS = CaptureLimits(max_samples=1000, max_bytes=10**9, retention_s=RETENTION)


@pytest.mark.parametrize(("limits", "kept", "pruned"), [
    (LIMITS, set(), ["older", "old"]),  # past retention, oldest first
    (LIMITS, {"older"}, ["old"]),  # claimed: skipped, the rest still goes
    (LIMITS, {"older", "old"}, []),
    (CaptureLimits(max_samples=20, max_bytes=10**9, retention_s=10**6), set(), ["older", "old"]),
    # Claimed shards still fill the buffer: over maxBufferSamples the oldest unclaimed go instead.
    (CaptureLimits(max_samples=20, max_bytes=10**9, retention_s=10**6), {"older"}, ["old", "mid"]),
    (CaptureLimits(max_samples=10**6, max_bytes=250, retention_s=10**6), {"older"}, ["old", "mid"]),
])
def test_what_is_prunable_given_retention_now_and_claims(limits, kept, pruned):
    due = prunable(BUFFER, limits, {f"p/captures/{k}" for k in kept}, NOW)
    assert [c.key.rsplit("/", 1)[1] for c in due] == pruned


@pytest.mark.parametrize(("window", "claimed"), [
    (10, ["mid", "fresh"]),  # shards past retention are never claimed (they are due for deletion)
    (1, ["fresh"]),
    (0, []),
])
def test_a_run_claims_the_newest_window_within_retention(window, claimed):
    got = claim_window(BUFFER, window, RETENTION, NOW)
    assert [c.key.rsplit("/", 1)[1] for c in got] == claimed


SHIFTED = [cap("before2", 900, samples=50), cap("before1", 600, samples=50), cap("after1", 400, samples=30),
           cap("after2", 200, samples=30), cap("after3", 100, samples=30)]


@pytest.mark.parametrize(("since", "min_samples", "window", "claimed"), [
    (None, 0, 10, ["before2", "before1", "after1", "after2", "after3"]),  # no shift: the newest window, as before
    (500.0, 0, 10, ["after1", "after2", "after3"]),  # a shift 500 s ago: only what was captured since
    (400.0, 0, 10, ["after1", "after2", "after3"]),  # a shard written at the shift's instant counts
    (500.0, 90, 10, ["after1", "after2", "after3"]),  # the shift's shards hold sampleThreshold: nothing older
    (500.0, 100, 10, ["before1", "after1", "after2", "after3"]),  # short of it: the newest older shards top it up
    (500.0, 10**6, 10, ["before2", "before1", "after1", "after2", "after3"]),  # never more than the buffer
    (500.0, 0, 2, ["after2", "after3"]),  # and never more than window_shards
    (50.0, 0, 10, []),  # nothing captured since: an empty claim, not the old domain's shards
])
def test_a_run_after_a_shift_claims_only_what_was_captured_since(since, min_samples, window, claimed):
    since_at = None if since is None else NOW - since
    got = claim_window(SHIFTED, window, RETENTION, NOW, since=since_at, min_samples=min_samples)
    assert [c.key.rsplit("/", 1)[1] for c in got] == claimed


@pytest.mark.parametrize(("samples", "rate", "timeout"), [
    (4096, 1.0, 3 * 4096),  # three times the expected run time
    (100, 1.0, MIN_DEFAULT_TIMEOUT_S),  # floor: 10 minutes
    (10**6, 1.0, MAX_DEFAULT_TIMEOUT_S),  # ceiling: 24 hours
    (2000, 10.0, MIN_DEFAULT_TIMEOUT_S),
    (30_000, 10.0, 9000.0),
    (5, 0.0, MAX_DEFAULT_TIMEOUT_S),  # no throughput known to price it: the longest default
    (0, 1.0, MIN_DEFAULT_TIMEOUT_S),
])
def test_the_default_timeout_and_its_bounds(samples, rate, timeout):
    assert default_training_timeout_s(samples, rate) == pytest.approx(timeout)


def test_a_spec_timeout_is_taken_as_written():
    assert training_timeout_s(40.0, 10**6, 1.0) == 40.0
    assert training_timeout_s(None, 4096, 1.0) == 3 * 4096


@pytest.mark.parametrize(("report", "rate"), [
    ({"samples": {"train_requests": 300}, "training": {"seconds": 60.0}}, 5.0),
    ({"samples": {"train_requests": 300}, "training": {"seconds": 0}}, None),
    ({"samples": {"train_requests": 0}, "training": {"seconds": 10}}, None),
    ({"samples": {}, "training": {"seconds": 10}}, None),
    ({}, None),
    (None, None),
])
def test_measured_throughput_from_a_report(report, rate):
    assert measured_samples_per_second(report) == rate
