"""The Lease adapter's loop (leader_election.LeaderElector) against an in-memory Lease store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client.rest import ApiException

from tide_operator.adapters.leader_election import LeaderElector
from tide_operator.control.leadership import LeaseRecord, LeaseTimings, Verdict

T0 = datetime(2026, 12, 5, 8, 0, 0, tzinfo=UTC)
TIMINGS = LeaseTimings(duration_s=15, renew_deadline_s=10, retry_s=2)


class MemoryLease:
    """A Lease with resourceVersion checks, like the API server's optimistic concurrency."""

    namespace, name = "tide-system", "tide-operator"

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.failing = False

    def read(self) -> tuple[LeaseRecord | None, str | None]:
        if self.failing:
            raise ApiException(status=503)
        return self.record, (str(self.version) if self.record else None)

    def write(self, record: LeaseRecord, resource_version: str | None) -> str | None:
        if self.failing:
            raise ApiException(status=503)
        if (self.record is None) != (resource_version is None) or \
                (resource_version is not None and resource_version != str(self.version)):
            return None  # 409
        self.record, self.version = record, self.version + 1
        return str(self.version)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def lease() -> MemoryLease:
    return MemoryLease()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def elector(lease: MemoryLease, clock: Clock, me: str) -> LeaderElector:
    return LeaderElector(lease, me, TIMINGS, clock)  # type: ignore[arg-type]


def test_first_comes_leads_second_waits_until_the_lease_expires_unrenewed(lease, clock) -> None:
    a, b = elector(lease, clock, "a"), elector(lease, clock, "b")
    assert a.step() is Verdict.ACQUIRE
    assert b.step() is Verdict.WAIT
    clock.tick(2)
    assert a.step() is Verdict.RENEW
    clock.tick(14)  # b looks again only now: a's renewal is a new resourceVersion to b ...
    assert b.step() is Verdict.WAIT  # ... so b's expiry clock restarts, whatever renewTime says
    clock.tick(15)  # a is dead: nobody renewed for the lease duration as b observed it
    assert b.step() is Verdict.ACQUIRE
    assert lease.record is not None
    assert (lease.record.holder, lease.record.transitions) == ("b", 1)
    assert a.step() is Verdict.LOST  # a comes back from a pause: b holds it now


def test_a_write_race_is_lost_not_fought(lease, clock) -> None:
    a, b = elector(lease, clock, "a"), elector(lease, clock, "b")
    original_read = lease.read
    lease.read = lambda: (None, None)  # type: ignore[method-assign]  # both saw no Lease ...
    assert a.step() is Verdict.ACQUIRE
    assert b.step() is Verdict.WAIT  # ... and b's create came second (409)
    lease.read = original_read  # type: ignore[method-assign]
    assert not b.leading


def test_a_leader_that_cannot_reach_the_api_gives_up_at_the_renew_deadline(lease, clock) -> None:
    a = elector(lease, clock, "a")
    assert a.step() is Verdict.ACQUIRE
    lease.failing = True
    clock.tick(9)
    assert a.step() is Verdict.RENEW  # still within the deadline: keep trying
    clock.tick(2)
    assert a.step() is Verdict.LOST


def test_release_hands_over_at_once(lease, clock) -> None:
    a, b = elector(lease, clock, "a"), elector(lease, clock, "b")
    a.step()
    b.step()
    a.release()
    assert not a.leading
    assert lease.record is not None
    assert (lease.record.holder, lease.record.duration_s) == ("", 1)
    clock.tick(0.1)
    assert b.step() is Verdict.ACQUIRE


def test_a_follower_releases_nothing(lease, clock) -> None:
    a, b = elector(lease, clock, "a"), elector(lease, clock, "b")
    a.step()
    b.step()
    b.release()
    assert lease.record is not None
    assert lease.record.holder == "a"
