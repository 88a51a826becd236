"""The control pass turns the policy's actions into effects and its state into status."""

from __future__ import annotations

from datetime import UTC, datetime

from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.control import actions as act
from tide_operator.control.policy import Observation, PolicyParams, PolicyState
from tide_operator.control_loop import EffectError, SensorReading, control_pass
from tide_operator.serving_status import StatusDraft

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PARAMS = PolicyParams(target_revision="r1")
GOOD_DRAFT_LOW_LOAD = Observation(acceptance_rate=0.7, acceptance_length=2.5, per_position_acceptance=(0.8, 0.7, 0.6),
                                  batch_size=4, generation_throughput=100.0, acceptance_samples=1000,
                                  promoted_version="initial")


class RecordingEffects:
    def __init__(self, fail_on: type | None = None) -> None:
        self.done: list[act.Action] = []
        self.fail_on = fail_on

    def _do(self, action: act.Action) -> None:
        if self.fail_on is not None and isinstance(action, self.fail_on):
            raise EffectError("pod chat-vllm-0 refused: 503 not_configured")
        self.done.append(action)

    set_speculation = set_capture = launch_training = cancel_training = _do
    start_canary = promote = roll_back = serve_draft = invalidate = _do


def serving_draft(**status: object) -> StatusDraft:
    return StatusDraft(TideDeploymentStatus(phase=Phase.SERVING, **status), generation=1, now=NOW)


def condition(draft: StatusDraft, kind: str):
    return next(c for c in draft.status.conditions if c.type == kind)


def test_a_good_draft_at_low_load_is_switched_on_through_the_effects():
    draft, effects = serving_draft(), RecordingEffects()
    state = control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), effects, now=0.0)

    assert any(isinstance(a, act.SetSpeculation) and a.enabled for a in effects.done)
    assert state.speculation.enabled
    assert draft.status.speculation.enabled
    assert draft.status.speculation.num_speculative_tokens == 3
    assert draft.status.speculation.modelled_speedup_percent is None  # measuring: no acceptance known yet
    assert draft.status.speculation.acceptance_length_milli == 2500
    assert condition(draft, "SpeculationEnabled").status == "True"
    assert condition(draft, "Degraded").status == "False"
    assert draft.status.control_state == state.to_dict()  # kept for a restart
    assert draft.status.last_decision is not None
    assert draft.status.phase is Phase.COLLECTING  # TIDE starts with collection on
    assert [e.reason for e in draft.events if e.reason == "MeasuringDraft"]


def test_state_round_trips_through_status_between_passes():
    draft = serving_draft()
    first = control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), RecordingEffects(), now=0.0)
    again = serving_draft(control_state=draft.status.control_state)
    effects = RecordingEffects()
    second = control_pass(again, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), effects, now=30.0)
    assert second.speculation.enabled == first.speculation.enabled
    assert second.acceptance_estimate == 0.8  # measured from position 0 once speculation ran
    assert again.status.speculation.modelled_speedup_percent > 100
    assert not any(isinstance(a, act.SetCapture) for a in effects.done)  # already on: not repeated


def test_missing_observation_holds_every_decision_and_says_why():
    draft = serving_draft()
    state = control_pass(draft, PARAMS, SensorReading(None, "prometheus: connection refused"), RecordingEffects(),
                         now=0.0)
    assert state == PolicyState()
    degraded = condition(draft, "Degraded")
    assert degraded.status == "True"
    assert degraded.reason == "PrometheusUnreachable"
    assert "connection refused" in degraded.message
    assert draft.status.speculation is None


def test_a_failed_effect_keeps_the_old_state_so_the_pass_is_retried():
    draft = serving_draft()
    state = control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), RecordingEffects(act.SetSpeculation),
                         now=0.0)
    assert state == PolicyState()
    assert draft.status.control_state is None
    assert "503 not_configured" in condition(draft, "Degraded").message
