"""Leader election decisions on a Lease (control/leadership.py), table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tide_operator.control.leadership import (
    Decision,
    LeaseRecord,
    LeaseTimings,
    Verdict,
    decide,
    holder_identity,
    record_from_spec,
    released,
    spec_from_record,
    user_agent,
)

T0 = datetime(2026, 12, 5, 8, 0, 0, tzinfo=UTC)
TIMINGS = LeaseTimings(duration_s=15, renew_deadline_s=10, retry_s=2)
ME, OTHER = "tide-operator-abc_1234", "tide-operator-def_5678"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def held_by(holder: str, transitions: int = 3, duration_s: int = 15) -> LeaseRecord:
    return LeaseRecord(holder, duration_s, acquire_time=T0, renew_time=T0, transitions=transitions)


# (case, lease as read, seen unchanged since, now, my last renewal (None: not leading), expected)
CASES = [
    ("no lease: create it", None, at(0), at(0), None,
     Decision(Verdict.ACQUIRE, LeaseRecord(ME, 15, at(0), at(0), 0))),
    ("released lease (empty holder): take it at once", held_by(""), at(0), at(0.1), None,
     Decision(Verdict.ACQUIRE, LeaseRecord(ME, 15, at(0.1), at(0.1), 4))),
    ("another's lease unrenewed for its duration: take it over", held_by(OTHER), at(0), at(15), None,
     Decision(Verdict.ACQUIRE, LeaseRecord(ME, 15, at(15), at(15), 4))),
    ("another's valid lease: wait", held_by(OTHER), at(0), at(14.9), None, Decision(Verdict.WAIT)),
    ("another's lease seen only recently: wait, whatever its renewTime says", held_by(OTHER), at(60), at(70),
     None, Decision(Verdict.WAIT)),
    ("released with a 1 s duration: expired after 1 s even if the holder were set", held_by(OTHER, duration_s=1),
     at(0), at(1), None, Decision(Verdict.ACQUIRE, LeaseRecord(ME, 15, at(1), at(1), 4))),
    ("own lease: renew, acquireTime and transitions kept", held_by(ME), at(0), at(2), at(0),
     Decision(Verdict.RENEW, LeaseRecord(ME, 15, T0, at(2), 3))),
    ("own lease, renew still within the deadline", held_by(ME), at(0), at(10), at(0),
     Decision(Verdict.RENEW, LeaseRecord(ME, 15, T0, at(10), 3))),
    ("renew deadline missed: lost", held_by(ME), at(0), at(10.5), at(0), Decision(Verdict.LOST)),
    ("leading but another holder wrote the lease: lost", held_by(OTHER), at(0), at(2), at(0),
     Decision(Verdict.LOST)),
    ("leading but the lease was released by someone: lost", held_by(""), at(0), at(2), at(0),
     Decision(Verdict.LOST)),
]


@pytest.mark.parametrize(("case", "current", "seen_since", "now", "last_renewed", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_decide(case: str, current: LeaseRecord | None, seen_since: datetime, now: datetime,
                last_renewed: datetime | None, expected: Decision) -> None:
    assert decide(current, ME, now, seen_since, TIMINGS, last_renewed) == expected


def test_release_empties_the_holder_and_shortens_the_duration() -> None:
    record = released(held_by(ME), at(5))
    assert record == LeaseRecord("", 1, T0, at(5), 3)
    # A follower that saw the lease a moment ago takes it over at once.
    assert decide(record, OTHER, at(5.1), at(5), TIMINGS).verdict is Verdict.ACQUIRE


@pytest.mark.parametrize(("duration", "deadline", "retry"), [(15, 15, 2), (15, 10, 10), (15, 10, 0), (5, 10, 2)])
def test_timings_must_nest(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError, match="retry"):
        LeaseTimings(duration_s=duration, renew_deadline_s=deadline, retry_s=retry)


def test_spec_round_trip_in_microtime() -> None:
    record = LeaseRecord(ME, 15, at(0.25), at(3.5), 7)
    spec = spec_from_record(record)
    assert spec == {"holderIdentity": ME, "leaseDurationSeconds": 15, "acquireTime": "2026-12-05T08:00:00.250000Z",
                    "renewTime": "2026-12-05T08:00:03.500000Z", "leaseTransitions": 7}
    assert record_from_spec(spec) == record


def test_an_empty_spec_reads_as_a_released_lease() -> None:
    assert record_from_spec({}) == LeaseRecord("", 0)
    assert decide(record_from_spec(None), ME, at(0), at(0), TIMINGS).verdict is Verdict.ACQUIRE


def test_identity_and_user_agent_name_the_pod() -> None:
    identity = holder_identity("tide-operator-7d9f-x2k", "a1b2c3")
    assert identity == "tide-operator-7d9f-x2k_a1b2c3"
    assert user_agent("0.4.0", identity) == "tide-operator/0.4.0 (tide-operator-7d9f-x2k_a1b2c3)"
