"""A user's one-shot requests (control/manual.py): parsed from annotations, refused or turned into actions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tide_operator.control import actions as act
from tide_operator.control.drift import DriftState
from tide_operator.control.lifecycle import LifecycleState, Phase, Step
from tide_operator.control.manual import (
    ABORT_ANNOTATION,
    PROMOTE_ANNOTATION,
    ROLLBACK_ANNOTATION,
    ManualRequest,
    Refusal,
    abort_request,
    after_flip,
    flip_request,
    manual_request,
)
from tide_operator.control.policy import PolicyParams, PolicyState
from tide_operator.control.probe import ProbeState

PARAMS = PolicyParams(target_revision="r1", observation_window_s=60.0)
CANARY = LifecycleState(phase=Phase.CANARY, candidate="abc-r3", canary_pods=("chat-vllm-1",))


def test_only_the_request_annotations_are_read_and_all_of_them_are_consumed() -> None:
    request = manual_request({PROMOTE_ANNOTATION: "v2", ABORT_ANNOTATION: "2026-12-05T08:00:00Z",
                              "tide.dev/rotate-token": "1", "kopf.zalando.org/last-handled-configuration": "{}"})
    assert request == ManualRequest(abort_canary=True, promote="v2", rollback=False,
                                    keys=(ABORT_ANNOTATION, PROMOTE_ANNOTATION))
    assert manual_request(None) == ManualRequest()
    assert manual_request({ROLLBACK_ANNOTATION: ""}).rollback  # any value asks, even an empty one


def test_abort_rolls_back_a_running_canary_and_is_refused_otherwise() -> None:
    step = abort_request(ManualRequest(abort_canary=True, keys=(ABORT_ANNOTATION,)), CANARY, now=100.0)
    assert isinstance(step, Step)
    assert step.state.phase is Phase.ROLLED_BACK
    assert step.state.last_canary_reason == "CanaryAborted"
    assert step.actions == (act.RollBack("abc-r3", "CanaryAborted", f"aborted by hand ({ABORT_ANNOTATION})",
                                         ("chat-vllm-1",)),)
    refused = abort_request(ManualRequest(abort_canary=True), LifecycleState(phase=Phase.TRAINING), now=100.0)
    assert refused == Refusal(ABORT_ANNOTATION, "no canary runs (lifecycle Training); nothing to abort")
    assert abort_request(ManualRequest(), CANARY, now=100.0) is None


def test_promote_and_rollback_become_pointer_flips() -> None:
    promote = flip_request(ManualRequest(promote="v2"), PolicyState(), PARAMS)
    assert promote == act.FlipPointer("v2", False, "ManualPromote", f"v2 promoted by hand ({PROMOTE_ANNOTATION})",
                                      PROMOTE_ANNOTATION)
    rollback = flip_request(ManualRequest(rollback=True), PolicyState(), PARAMS)
    assert isinstance(rollback, act.FlipPointer)
    assert (rollback.version, rollback.rollback, rollback.annotation) == (None, True, ROLLBACK_ANNOTATION)
    assert flip_request(ManualRequest(abort_canary=True), PolicyState(), PARAMS) is None


@pytest.mark.parametrize(("request_", "state", "params", "says"), [
    (ManualRequest(promote="v2"), PolicyState(), replace(PARAMS, draft_pin="v1"),
     "spec.control.draftPin=v1 holds the draft: unpin first"),
    (ManualRequest(rollback=True), PolicyState(), replace(PARAMS, draft_pin="v1"), "draftPin=v1"),
    (ManualRequest(promote="v2"), PolicyState(lifecycle=CANARY), PARAMS, "a canary of abc-r3 runs: abort it first"),
    (ManualRequest(rollback=True), PolicyState(lifecycle=CANARY), PARAMS, "a canary of abc-r3 runs"),
    (ManualRequest(promote="latest"), PolicyState(), PARAMS, "'latest' is not a draft version like v3 (or initial"),
    (ManualRequest(promote="initial2"), PolicyState(), PARAMS, "not a draft version"),
    (ManualRequest(promote="v0"), PolicyState(), PARAMS, "not a draft version"),
    (ManualRequest(promote="v2", rollback=True), PolicyState(), PARAMS, "are both set: ask for one"),
])
def test_refused_flips_name_the_annotation_and_say_why(request_, state, params, says) -> None:
    refused = flip_request(request_, state, params)
    assert isinstance(refused, Refusal)
    assert refused.annotation == (PROMOTE_ANNOTATION if request_.promote is not None else ROLLBACK_ANNOTATION)
    assert says in refused.message


def test_after_a_flip_the_loop_treats_the_served_draft_as_new() -> None:
    warm = DriftState(short_ema=0.4, long_ema=0.8, updated_at=50.0, warmup_samples=500)
    state = PolicyState(acceptance_estimate=0.8, drift=warm, shift_active=True, table_acceptance=0.8,
                        probe=ProbeState(quiet_since=10.0, best_acceptance=0.9, unpaid=2))
    after = after_flip(state, PARAMS, now=100.0)
    assert after.drift == DriftState(hold_until=160.0)  # warms up again, ignoring one window of the old draft
    assert not after.shift_active
    assert after.probe == ProbeState(best_acceptance=0.8)
    assert after.acceptance_estimate == 0.8  # a prior only: the next measurement replaces it
    assert after.table_acceptance is None  # the table is retuned at the next measurement
    assert after.lifecycle == state.lifecycle
