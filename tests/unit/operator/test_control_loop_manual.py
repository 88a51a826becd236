"""A user's requests in the control pass: carried out before the policy decides, consumed once, retried
only when an effect failed (control/manual.py, control_loop._manual)."""

from __future__ import annotations

from datetime import UTC, datetime

from tide_operator.api.status import CanaryStatus, Phase, TideDeploymentStatus
from tide_operator.control import actions as act
from tide_operator.control.drift import DriftState
from tide_operator.control.lifecycle import LifecycleState
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.manual import ABORT_ANNOTATION, PROMOTE_ANNOTATION, ROLLBACK_ANNOTATION, manual_request
from tide_operator.control.policy import Observation, PolicyParams, PolicyState
from tide_operator.passes.control_loop import DraftRefused, EffectError, SensorReading, control_pass
from tide_operator.passes.serving_status import StatusDraft

NOW = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
PARAMS = PolicyParams(target_revision="r1", observation_window_s=60.0)
SERVING_V3 = Observation(acceptance_rate=0.7, acceptance_length=2.5, per_position_acceptance=(0.8, 0.7, 0.6),
                         batch_size=4, generation_throughput=100.0, acceptance_samples=1000, promoted_version="v3")
WARM = PolicyState(acceptance_estimate=0.8, drift=DriftState(short_ema=0.8, long_ema=0.8, updated_at=0.0,
                                                             warmup_samples=500))


class Effects:
    """Records every effect; the pointer starts at v3 and moves only through flip_pointer."""

    def __init__(self, flip_error: EffectError | None = None) -> None:
        self.done: list[object] = []
        self.pointer, self.flip_error = "v3", flip_error

    def flip_pointer(self, action: act.FlipPointer) -> tuple[str | None, str]:
        if self.flip_error is not None:
            raise self.flip_error
        self.done.append(action)
        before, self.pointer = self.pointer, action.version or "v2"
        return before, self.pointer

    def _do(self, action: object) -> None:
        self.done.append(action)

    set_speculation = set_capture = launch_training = cancel_training = _do
    start_canary = promote = roll_back = serve_draft = invalidate = _do

    def converge(self, *_: object, **__: object) -> list[str]:
        return []

    def converge_drafts(self, _: object) -> list[str]:
        return []


def draft_with(state: PolicyState, **status: object) -> StatusDraft:
    return StatusDraft(TideDeploymentStatus(phase=Phase.SERVING, control_state=state.to_dict(), **status),
                       generation=1, now=NOW)


def test_a_rollback_flips_the_pointer_then_the_policy_decides_on_the_new_draft() -> None:
    draft, effects = draft_with(WARM), Effects()
    request = manual_request({ROLLBACK_ANNOTATION: "2026-12-05T08:00:00Z"})
    state = control_pass(draft, PARAMS, SensorReading(SERVING_V3), effects, now=1000.0, manual=request)

    flip = effects.done[0]
    assert isinstance(flip, act.FlipPointer)
    assert (flip.rollback, flip.version) == (True, None)
    assert draft.consumed_requests == [ROLLBACK_ANNOTATION]
    assert state.drift.hold_until == 1060.0  # the rate window still holds v3's numbers: not fed to the detector
    assert draft.status.draft.current == "v2"  # the pass reports the version the flip left served
    event = next(e for e in draft.events if e.reason == "ManualRollback")
    assert event.message.startswith("FlipPointer: v3 -> v2: rolled back by hand")
    assert ROLLBACK_ANNOTATION in event.message
    assert draft.status.last_decision is not None


def test_a_refused_request_is_consumed_with_a_warning_and_changes_nothing() -> None:
    draft, effects = draft_with(WARM), Effects()
    pinned = PolicyParams(target_revision="r1", draft_pin="v3")
    state = control_pass(draft, pinned, SensorReading(SERVING_V3), effects,
                         now=1000.0, manual=manual_request({PROMOTE_ANNOTATION: "v2"}))
    assert not any(isinstance(a, act.FlipPointer) for a in effects.done)
    assert draft.consumed_requests == [PROMOTE_ANNOTATION]
    refusal = next(e for e in draft.events if e.reason == "RequestRefused")
    assert refusal.type == "Warning"
    assert refusal.message == f"{PROMOTE_ANNOTATION}: spec.control.draftPin=v3 holds the draft: unpin first"
    assert state.drift == WARM.drift


def test_a_version_the_registry_does_not_have_is_refused_not_retried() -> None:
    effects = Effects(flip_error=DraftRefused("UnknownVersion", "v9 was never promoted (no llm/chat/drafts/v9/)"))
    draft = draft_with(WARM)
    control_pass(draft, PARAMS, SensorReading(SERVING_V3), effects, now=1000.0,
                 manual=manual_request({PROMOTE_ANNOTATION: "v9"}))
    assert draft.consumed_requests == [PROMOTE_ANNOTATION]
    assert any(e.message == f"{PROMOTE_ANNOTATION}: v9 was never promoted (no llm/chat/drafts/v9/)"
               for e in draft.events)


def test_a_failed_flip_keeps_the_request_for_the_next_pass() -> None:
    draft = draft_with(WARM)
    state = control_pass(draft, PARAMS, SensorReading(SERVING_V3), Effects(flip_error=EffectError("S3: timeout")),
                         now=1000.0, manual=manual_request({ROLLBACK_ANNOTATION: "x"}))
    assert draft.consumed_requests == []
    assert state == WARM
    degraded = next(c for c in draft.status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.message) == ("True", "ManualRollback: S3: timeout")


def test_abort_rolls_the_canary_back_even_without_an_observation() -> None:
    canary = LifecycleState(phase=LifecyclePhase.CANARY, candidate="abc-r3", canary_pods=("chat-vllm-1",))
    draft = draft_with(PolicyState(lifecycle=canary), canary=CanaryStatus(candidate="abc-r3", pods=("chat-vllm-1",)))
    effects = Effects()
    state = control_pass(draft, PARAMS, SensorReading(None, "prometheus: connection refused"), effects,
                         now=1000.0, manual=manual_request({ABORT_ANNOTATION: "now"}))
    assert [type(a).__name__ for a in effects.done] == ["RollBack"]
    assert effects.done[0].pods == ("chat-vllm-1",)
    assert state.lifecycle.phase is LifecyclePhase.ROLLED_BACK
    assert PolicyState.from_dict(draft.status.control_state).lifecycle.phase is LifecyclePhase.ROLLED_BACK
    assert draft.status.canary is None
    assert draft.consumed_requests == [ABORT_ANNOTATION]
    assert any(e.reason == "CanaryAborted" and e.type == "Warning" for e in draft.events)


def test_a_paused_deployment_still_takes_a_flip_by_hand() -> None:
    draft, effects = draft_with(WARM), Effects()
    paused = PolicyParams(target_revision="r1", paused=True)
    control_pass(draft, paused, SensorReading(SERVING_V3), effects, now=1000.0,
                 manual=manual_request({PROMOTE_ANNOTATION: "v1"}))
    assert [a.version for a in effects.done if isinstance(a, act.FlipPointer)] == ["v1"]
    assert effects.pointer == "v1"
    assert draft.consumed_requests == [PROMOTE_ANNOTATION]
