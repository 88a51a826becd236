from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tide_operator.api.conditions import ConditionType, Reason, find_condition, rfc3339, set_condition
from tide_operator.api.status import REASON_PATTERN, ConditionStatus

T0 = datetime(2026, 12, 2, 13, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def _ready(conditions=(), status="False", reason=Reason.INVALID_SPEC, message="spec.x: bad", generation=1, now=T0):
    return set_condition(
        conditions,
        ConditionType.READY,
        status,
        reason=reason,
        message=message,
        generation=generation,
        now=now,
    )


def test_new_condition_is_appended_with_the_time() -> None:
    conditions, changed = _ready()
    assert changed
    (ready,) = conditions
    assert (ready.type, ready.status, ready.reason) == ("Ready", ConditionStatus.FALSE, "InvalidSpec")
    assert ready.last_transition_time == "2026-12-02T13:00:00Z"
    assert ready.observed_generation == 1


def test_same_condition_again_changes_nothing() -> None:
    conditions, _ = _ready()
    again, changed = _ready(conditions, now=T1)
    assert not changed
    assert again == conditions


def test_time_stays_when_only_reason_message_or_generation_change() -> None:
    conditions, _ = _ready()
    updated, changed = _ready(conditions, reason=Reason.MISSING_CREDENTIALS, message="other", generation=2, now=T1)
    assert changed
    assert updated[0].last_transition_time == "2026-12-02T13:00:00Z"
    assert (updated[0].reason, updated[0].message, updated[0].observed_generation) == (
        "MissingCredentials",
        "other",
        2,
    )


def test_time_moves_when_status_flips() -> None:
    conditions, _ = _ready()
    flipped, changed = _ready(conditions, status="True", reason=Reason.REPLICAS_READY, now=T1)
    assert changed
    assert flipped[0].last_transition_time == "2026-12-02T13:05:00Z"


def test_other_conditions_keep_their_place_and_input_is_untouched() -> None:
    conditions, _ = _ready()
    conditions, _ = set_condition(
        conditions,
        ConditionType.SCHEDULED,
        ConditionStatus.TRUE,
        reason=Reason.POOLS_CHOSEN,
        message="",
        generation=1,
        now=T0,
    )
    before = tuple(conditions)
    updated, changed = _ready(conditions, status="True", reason=Reason.REPLICAS_READY, now=T1)
    assert changed
    assert conditions == before
    assert [condition.type for condition in updated] == ["Ready", "Scheduled"]
    assert find_condition(updated, "Scheduled") == conditions[1]
    assert find_condition(updated, "Training") is None


def test_empty_message_is_replaced_by_the_reason() -> None:
    conditions, _ = _ready(message="")
    assert conditions[0].message == "InvalidSpec"


def test_status_must_be_true_false_or_unknown() -> None:
    with pytest.raises(ValueError, match="Maybe"):
        _ready(status="Maybe")


def test_reasons_are_valid_kubernetes_reasons() -> None:
    reasons = [value for name, value in vars(Reason).items() if name.isupper()]
    assert len(reasons) > 20
    assert all(re.match(REASON_PATTERN, reason) for reason in reasons)
    assert len(set(reasons)) == len(reasons)


def test_rfc3339_converts_to_utc() -> None:
    assert rfc3339(datetime(2026, 1, 1, 12, 0, 0, 999, tzinfo=UTC)) == "2026-01-01T12:00:00Z"
    assert rfc3339(datetime(2026, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-01T12:00:00Z"
