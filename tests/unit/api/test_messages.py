"""Every condition and Event message is stripped of credentials and bounded in length."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tide_operator.api.conditions import set_condition
from tide_operator.api.messages import MESSAGE_LIMIT, bounded_message, redact, truncate
from tide_operator.api.status import Condition, ConditionStatus, Decision, TideDeploymentStatus
from tide_operator.passes.serving_status import EventNote, StatusDraft

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("prometheus https://ops:hunter2@prom:9090: down", "prometheus https://***@prom:9090: down"),
    ("see http://user@host/x and s3://k:s@b/p", "see http://***@host/x and s3://***@b/p"),
    ("{'Authorization': 'Bearer abc.def-ghi'}", "{'Authorization': 'Bearer ***'}"),
    ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ***"),
    ("proxy-authorization=sekret rest", "proxy-authorization=*** rest"),
    ("token was bearer eyJhbGciOiJIUzI1NiJ9.x", "token was bearer ***"),
    ("GET /q?query=up&access_token=abc123&x=1", "GET /q?query=up&access_token=***&x=1"),
    ("an email a@b.c and a path /a/b stay", "an email a@b.c and a path /a/b stay"),
    ("basic authentication required", "basic authentication required"),
])
def test_redact_strips_userinfo_authorization_and_token_parameters(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_redact_removes_known_secrets_wherever_they_appear() -> None:
    assert redact("HTTP 401 (b'bad password s3cr3t-pw for alice')", ["s3cr3t-pw", ""]) == \
        "HTTP 401 (b'bad password *** for alice')"


def test_truncate_keeps_short_messages_and_marks_long_ones() -> None:
    assert truncate("short", 10) == "short"
    cut = truncate("x" * 5000, 100)
    assert len(cut) == 100
    assert cut.endswith(" ...[5000 chars, truncated]")


def test_redaction_comes_before_the_cut() -> None:
    # A cut through the middle of a URL must not leave its password behind.
    text = "a" * (MESSAGE_LIMIT - 50) + " https://u:pw-0123456789@h/"
    assert "pw-0123" not in bounded_message(text)


def test_a_condition_message_over_32_kib_is_bounded_not_refused() -> None:
    body = "HTTP Status Code 500 (b'" + "<html>" * 10_000 + "')"  # 60 KB error body
    conditions, changed = set_condition((), "Degraded", ConditionStatus.TRUE, reason="PrometheusUnreachable",
                                        message=f"prometheus https://u:pw@p: {body}", generation=1, now=NOW)
    (condition,) = conditions
    assert changed
    assert len(condition.message) == MESSAGE_LIMIT
    assert condition.message.startswith("prometheus https://***@p: HTTP Status Code 500")
    assert "pw" not in condition.message
    # The bound is stable: the next pass sets the same message and changes nothing.
    assert set_condition(conditions, "Degraded", ConditionStatus.TRUE, reason="PrometheusUnreachable",
                         message=f"prometheus https://u:pw@p: {body}", generation=1, now=NOW) == (conditions, False)


def test_decisions_and_events_are_bounded_too() -> None:
    decision = Decision(time="t", action="Promote", reason="Promoted", message="y" * 40_000)
    assert len(decision.message or "") == MESSAGE_LIMIT
    note = EventNote("Warning", "PrometheusUnreachable", "Authorization: Bearer abcdefgh " + "z" * 9000)
    assert len(note.message) == MESSAGE_LIMIT
    assert note.message.startswith("Authorization: Bearer *** zzz")


def test_a_condition_flip_posts_a_bounded_event() -> None:
    draft = StatusDraft(TideDeploymentStatus(), generation=1, now=NOW)
    draft.condition("Degraded", True, "PrometheusUnreachable", "https://a:b@p " + "q" * 5000, warn=True)
    (event,) = draft.events
    assert len(event.message) == MESSAGE_LIMIT
    assert "a:b" not in event.message
    stored: Condition = draft.status.conditions[0]
    assert stored.message.startswith("https://***@p qqq")
