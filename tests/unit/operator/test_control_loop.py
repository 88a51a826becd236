"""The control pass turns the policy's actions into effects and its state into status."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryAnalysis
from tide_operator.control.lifecycle import LifecycleState, TrainingObservation, TrainingStatus
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.policy import Observation, PolicyParams, PolicyState
from tide_operator.control.probe import ProbeState
from tide_operator.control.speculation import SpeculationState
from tide_operator.passes.control_loop import EffectError, SensorReading, control_pass
from tide_operator.passes.pod_convergence import CanaryPods
from tide_operator.passes.serving_status import StatusDraft

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PARAMS = PolicyParams(target_revision="r1")
GOOD_DRAFT_LOW_LOAD = Observation(acceptance_rate=0.7, acceptance_length=2.5, per_position_acceptance=(0.8, 0.7, 0.6),
                                  batch_size=4, generation_throughput=100.0, acceptance_samples=1000,
                                  promoted_version="initial")


class RecordingEffects:
    def __init__(self, fail_on: type | None = None, lagging: list[str] | None = None) -> None:
        self.done: list[act.Action] = []
        self.fail_on = fail_on
        self.lagging = lagging or []  # pods that missed a switch: converge corrects them
        self.converged: list[tuple[bool, bool]] = []
        self.stale: list[str] = []  # pods serving another draft: converge_drafts swaps them
        self.draft_calls: list[object] = []

    def converge(self, speculation: bool, capture: bool, bands: object = None, canary: object = None,
                 acceptance: object = None) -> list[str]:
        self.converged.append((speculation, capture))
        self.bands, self.canary = bands, canary
        fixed, self.lagging = self.lagging, []
        return fixed

    def converge_drafts(self, canary: object) -> list[str]:
        self.draft_calls.append(canary)
        swapped, self.stale = self.stale, []
        return swapped

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
    assert draft.status.speculation.acceptance_length_milli == 2500  # kept for older readers
    assert draft.status.speculation.acceptance_length == 2.5  # the Acceptance printer column
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


def test_modelled_speedup_is_at_the_g_the_table_runs_at_the_observed_batch_size():
    from tide_operator.control.cost_model import practical_speedup

    table = ((1, 8, 3), (9, 64, 1), (65, 256, 0))
    state = PolicyState(acceptance_estimate=0.6, table=table, table_acceptance=0.6,
                        speculation=replace(PolicyState().speculation, enabled=True))
    speedups = {}
    for batch, g in ((4, 3), (32, 1), (200, 0)):
        draft = serving_draft(control_state=state.to_dict())
        control_pass(draft, PARAMS, SensorReading(replace(GOOD_DRAFT_LOW_LOAD, batch_size=batch,
                                                          acceptance_samples=0)), RecordingEffects(), now=0.0)
        speedups[batch] = draft.status.speculation.modelled_speedup_percent
        expected = round(100 * practical_speedup(0.6, g, batch, PARAMS.profile)) if g else 100
        assert speedups[batch] == expected, (batch, g)
    # At batch 32 the table drafts 1 token: the maximum K's number would be lower than the one that runs.
    assert speedups[32] != round(100 * practical_speedup(0.6, 3, 32, PARAMS.profile))


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


def test_pods_that_missed_a_switch_are_converged_in_a_later_pass_and_it_is_an_event():
    draft, converged_in = serving_draft(), []
    for now in (0.0, 30.0, 60.0, 90.0):
        draft = serving_draft(control_state=draft.status.control_state)
        effects = RecordingEffects(lagging=["chat-vllm-new: capture on"])
        state = control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), effects, now=now)
        switched = any(isinstance(a, act.SetSpeculation | act.SetCapture) for a in effects.done)
        # A pass that switched every pod itself does not ask them again.
        assert effects.converged == ([] if switched else [(state.speculation.enabled,
                                                           state.lifecycle.capture_enabled)])
        if effects.converged:
            assert effects.bands == state.table  # the per-batch-size bands in force, too
            converged_in.append(now)
            assert [e.message for e in draft.events if e.reason == "PodsConverged"] == [
                "chat-vllm-new: capture on (missed while it started)"]
    assert converged_in


def _settled() -> StatusDraft:
    """Passes until one switches nothing (speculation on, its table retuned to the measured a)."""
    draft = serving_draft()
    for now in (0.0, 30.0, 60.0):
        draft = serving_draft(control_state=draft.status.control_state)
        effects = RecordingEffects()
        control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), effects, now=now)
    assert not any(isinstance(a, act.SetSpeculation | act.SetCapture) for a in effects.done)
    return draft


def _in_canary(draft: StatusDraft) -> StatusDraft:
    """The pass's state from ``draft`` with a canary of c1 on chat-vllm-a running since t=0."""
    state = PolicyState.from_dict(draft.status.control_state)
    canary = replace(state.lifecycle, phase=LifecyclePhase.CANARY, phase_since=0.0, candidate="c1",
                     candidate_acceptance_length=2.6, canary=CanaryAnalysis(started_at=0.0),
                     canary_pods=("chat-vllm-a",), capture_enabled=False)  # capture pauses in a canary
    return serving_draft(control_state=replace(state, lifecycle=canary).to_dict())


def test_drafts_converge_to_the_canary_and_the_pointer_and_it_is_an_event_naming_the_pods():
    draft = _in_canary(_settled())
    effects = RecordingEffects()
    effects.stale = ["chat-vllm-b: draft initial -> v3"]
    control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), effects, now=90.0)
    assert not any(isinstance(a, act.SetSpeculation | act.SetCapture) for a in effects.done)
    assert effects.draft_calls == [CanaryPods("c1", ("chat-vllm-a",))]
    assert [e.message for e in draft.events if e.reason == "DraftsConverged"] == ["chat-vllm-b: draft initial -> v3"]
    assert draft.status.canary is not None
    assert (draft.status.canary.candidate, draft.status.canary.pods) == ("c1", ("chat-vllm-a",))


def test_the_served_draft_and_the_candidate_are_reported_for_the_draft_column():
    draft = _in_canary(_settled())
    control_pass(draft, PARAMS, SensorReading(replace(GOOD_DRAFT_LOW_LOAD, promoted_version="v2")),
                 RecordingEffects(), now=90.0)
    assert draft.status.draft is not None
    assert (draft.status.draft.current, draft.status.draft.candidate) == ("v2", "c1")
    assert draft.status.draft.served_revision == "r1"

    bare = serving_draft()
    control_pass(bare, PARAMS, SensorReading(replace(GOOD_DRAFT_LOW_LOAD, promoted_version=None)),
                 RecordingEffects(), now=0.0)
    assert bare.status.draft is not None
    assert (bare.status.draft.current, bare.status.draft.served_revision) == (None, None)  # nothing served yet


def test_a_pass_that_moves_drafts_itself_or_a_pinned_draft_leaves_the_stragglers_to_later():
    draft = _settled()
    aborted = RecordingEffects()
    canary = _in_canary(draft)
    control_pass(canary, replace(PARAMS, abort_canary=True), SensorReading(GOOD_DRAFT_LOW_LOAD), aborted, now=90.0)
    assert any(isinstance(a, act.RollBack) and a.pods == ("chat-vllm-a",) for a in aborted.done)
    assert aborted.draft_calls == []
    assert canary.status.canary is None  # the canary is over
    for now in (90.0, 120.0):  # the first pinned pass turns capture off: the second switches nothing
        draft, pinned = serving_draft(control_state=draft.status.control_state), RecordingEffects()
        control_pass(draft, replace(PARAMS, draft_pin="v1"),
                     SensorReading(replace(GOOD_DRAFT_LOW_LOAD, promoted_version="v1")), pinned, now=now)
    assert pinned.converged  # the switches were converged in this pass, the drafts were not
    assert pinned.draft_calls == []


def test_a_paused_deployment_leaves_its_pods_as_they_are():
    draft = serving_draft()
    control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), RecordingEffects(), now=0.0)
    again = serving_draft(control_state=draft.status.control_state)
    effects = RecordingEffects(lagging=["chat-vllm-new: capture on"])
    control_pass(again, replace(PARAMS, paused=True), SensorReading(GOOD_DRAFT_LOW_LOAD), effects, now=30.0)
    assert effects.converged == []


@pytest.mark.parametrize(("training", "reason", "outcome", "kind"), [
    (TrainingObservation("r1", TrainingStatus.SUCCEEDED, 2.9, 2.1), "TrainingSucceeded", "succeeded", "Normal"),
    (TrainingObservation("r1", TrainingStatus.NOT_BETTER, 2.0, 2.1), "CandidateNotBetter", "succeeded", "Normal"),
    (TrainingObservation("r1", TrainingStatus.FAILED), "TrainingFailed", "failed", "Warning"),
])
def test_a_trainer_job_that_ends_is_an_event_with_its_outcome_for_the_jobs_metric(training, reason, outcome, kind):
    lifecycle = LifecycleState(phase=LifecyclePhase.TRAINING, phase_since=0.0, capture_enabled=True,
                               target_revision="r1", run_counter=1, active_run="r1")
    draft = serving_draft(control_state=PolicyState(lifecycle=lifecycle).to_dict())
    observation = replace(GOOD_DRAFT_LOW_LOAD, training=training)
    control_pass(draft, PARAMS, SensorReading(observation), RecordingEffects(), now=60.0)
    ended = [e for e in draft.events if e.training_outcome]
    assert [(e.type, e.reason, e.training_outcome) for e in ended] == [(kind, reason, outcome)]
    assert "r1" in ended[0].message

    # While the Job runs, nothing is counted.
    draft = serving_draft(control_state=PolicyState(lifecycle=lifecycle).to_dict())
    running = replace(GOOD_DRAFT_LOW_LOAD, training=TrainingObservation("r1", TrainingStatus.RUNNING))
    control_pass(draft, PARAMS, SensorReading(running), RecordingEffects(), now=60.0)
    assert not [e for e in draft.events if e.training_outcome]


def test_a_not_better_run_under_a_lasting_shift_is_counted_and_collection_goes_on():
    """Issue 15, mechanism 5: the verdict is ShiftPersists, still a run that succeeded for the jobs metric."""
    from tide_operator.control.drift import DriftState

    lifecycle = LifecycleState(phase=LifecyclePhase.TRAINING, phase_since=0.0, capture_enabled=True,
                               target_revision="r1", run_counter=1, active_run="r1", shift_at=0.0)
    drift = DriftState(short_ema=0.3, long_ema=0.7, updated_at=30.0, warmup_samples=1000)
    draft = serving_draft(control_state=PolicyState(lifecycle=lifecycle, drift=drift, shift_active=True).to_dict())
    observation = replace(GOOD_DRAFT_LOW_LOAD, per_position_acceptance=(0.3,),
                          training=TrainingObservation("r1", TrainingStatus.NOT_BETTER, 2.0, 2.1))
    effects = RecordingEffects()
    state = control_pass(draft, PARAMS, SensorReading(observation), effects, now=60.0)
    ended = [(e.type, e.reason, e.training_outcome) for e in draft.events if e.training_outcome]
    assert ended == [("Normal", "ShiftPersists", "succeeded")]
    assert state.lifecycle.phase is LifecyclePhase.COLLECTING
    assert not [a for a in effects.done if isinstance(a, act.SetCapture)]  # capture stays on


def test_a_switch_carried_out_by_rolling_the_pods_is_a_warning_event():
    class RollingEffects(RecordingEffects):
        def set_speculation(self, action: act.Action) -> str:
            self.done.append(action)
            return "the pods switch speculation only by a restart (409 restart_required): rolling them"

    draft, effects = serving_draft(), RollingEffects()
    state = control_pass(draft, PARAMS, SensorReading(GOOD_DRAFT_LOW_LOAD), effects, now=0.0)
    assert state.speculation.enabled  # the switch is done (by the roll): the decision is kept
    rolled = [e for e in draft.events if e.reason == "PodsRolledForSpeculation"]
    assert [(e.type, e.action) for e in rolled] == [("Warning", "RollPods")]
    assert "restart_required" in rolled[0].message
    assert condition(draft, "SpeculationEnabled").message.endswith("pods rolled (no runtime switch)")


def test_pods_probing_the_draft_converge_to_speculating_while_the_switch_is_off():
    """A probe (control/probe.py) has the pods speculate with its table although the switch is off:
    a pass in the middle of it must not converge them back to off."""
    table = ((1, 40, 1), (41, 256, 0))
    settled = PolicyState.from_dict(_settled().status.control_state)
    state = replace(settled, speculation=SpeculationState(enabled=False, changed_at=-1000.0), acceptance_estimate=0.1,
                    table=table, probe=ProbeState(started_at=60.0, quiet_since=-700.0, best_acceptance=0.7))
    draft, effects = serving_draft(control_state=state.to_dict()), RecordingEffects()
    unmeasured_yet = Observation(batch_size=16, acceptance_samples=0, promoted_version="initial")
    after = control_pass(draft, PARAMS, SensorReading(unmeasured_yet), effects, now=90.0)
    assert after.probe.running
    assert not any(isinstance(a, act.SetSpeculation) for a in effects.done)
    assert effects.converged == [(True, after.lifecycle.capture_enabled)]
    assert effects.bands == table
    assert condition(draft, "SpeculationEnabled").reason == "ProbingDraft"
