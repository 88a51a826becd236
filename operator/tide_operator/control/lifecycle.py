"""The draft lifecycle: Serving -> Collecting -> [Recalling] -> Training -> Evaluating -> Canary -> Promoted.

(Or RolledBack; a draft recalled from the pool goes from Recalling to Evaluating without training.)

One pure step per reconcile pass: (state, inputs, params, now) -> (actions, new state, why).
This module dispatches on the phase and owns what cuts across phases (a shift, a pin, a new target
revision, capture disabled); the training side (Collecting, Training) is control/lifecycle_training.py,
the draft pool's recall (Recalling) control/lifecycle_recall.py, the candidate side (Evaluating,
Canary, Promoted, RolledBack) control/lifecycle_canary.py. The state is plain data
(control/lifecycle_types.py), stored in status (control/restart.py), so a restarted operator
resumes where it stopped.
"""

from __future__ import annotations

from dataclasses import replace

from tide_operator.control import actions as act
from tide_operator.control.lifecycle_canary import (
    canary_phase,
    evaluating,
    promoted,
    refuse_candidate,
    roll_back,
    rolled_back,
)
from tide_operator.control.lifecycle_recall import (
    pool_to_try,
    recall_on_rise,
    recalled_short,
    recalling,
    watch_recalled,
)
from tide_operator.control.lifecycle_training import collecting, training
from tide_operator.control.lifecycle_types import (
    CaptureParams,
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    RecallObservation,
    RecallParams,
    Step,
    TrainingObservation,
    TrainingParams,
    TrainingStatus,
    run_id_for,
    run_number,
    stay,
    to_phase,
)

__all__ = [  # the types are re-exported: callers import the lifecycle from one place
    "CaptureParams", "LifecycleInput", "LifecycleParams", "LifecycleState", "Phase", "RecallObservation",
    "RecallParams", "Step",
    "TrainingObservation", "TrainingParams", "TrainingStatus", "refuse_candidate", "run_id_for", "run_number",
    "step_lifecycle",
]


def step_lifecycle(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    return _capture_allowed(state, _step(state, inputs, params, now), params)


def _capture_allowed(before: LifecycleState, step: Step, params: LifecycleParams) -> Step:
    """spec.control.capture.enabled=false wins in every phase: captures derive from user prompts."""
    if params.capture.enabled or not step.state.capture_enabled:
        return step
    actions: tuple[act.Action, ...] = tuple(a for a in step.actions if not isinstance(a, act.SetCapture))
    if before.capture_enabled:
        actions += (act.SetCapture(False, "CaptureDisabled", "spec.control.capture.enabled is false"),)
    return Step(actions, replace(step.state, capture_enabled=False), step.reason, step.message)


def _step(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    if state.target_revision is None:
        state = replace(state, target_revision=inputs.target_revision, phase_since=now)
    elif state.target_revision != inputs.target_revision:
        return _target_changed(state, inputs, params, now)
    state = _same_count(state, inputs)
    if inputs.shift_started:  # runs from now on claim only what is captured from here on
        state = replace(state, shift_at=now)
    if inputs.draft_pin is not None:
        return _pinned(state, inputs, now)
    if state.phase is Phase.CANARY and inputs.abort_canary:
        return roll_back(state, now, "CanaryAborted", "control.abortCanary is set")
    changed = _traffic_changed(state, inputs, params, now)
    if changed is not None:
        return changed
    handler = _HANDLERS[state.phase]
    return handler(state, inputs, params, now)


def _same_count(state: LifecycleState, inputs: LifecycleInput) -> LifecycleState:
    """The baseline counted from where this pass's buffer counts. The buffer counts from the latest training
    Job's launch; a cancelled Job is gone by a later pass and the count starts over from an older one (or
    from the first capture), so a baseline taken before would call every older sample new: a whole-loop run
    launched the pool's evaluation on "693 samples since the shift" a pass after the shift cancelled a run.
    Where the count's start moved, the baseline is taken again (this pass's samples count from here)."""
    if inputs.buffer_since is None or inputs.buffer_since == state.buffer_since:
        return state
    if state.buffer_since is None:  # the first pass that knows it (or state from before it was kept)
        return replace(state, buffer_since=inputs.buffer_since)
    moved_back = inputs.buffer_since < state.buffer_since
    baseline = inputs.buffer_samples if moved_back else state.buffer_baseline
    return replace(state, buffer_since=inputs.buffer_since, buffer_baseline=baseline)


def _traffic_changed(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams,
                     now: float) -> Step | None:
    """Work built on samples of the old traffic, once the traffic changed: a fall, a rise, a return."""
    if inputs.shift_started and state.phase in _STALE_ON_SHIFT:
        return _recollect(state, inputs, now)
    if inputs.rise_started and state.phase in _STALE_ON_SHIFT and not state.recall_only \
            and pool_to_try(inputs, params):
        # Acceptance rose: the traffic changed as much as on a fall (a return home), so the samples are as
        # stale; the pool is tried on the new traffic first (lifecycle_recall.py). With no pooled draft to
        # try, the run goes on: the served draft does better than before, and a rise on noise alone
        # would cancel a good round (the policy bench's short excursions).
        return _recollect(replace(state, shift_at=now), inputs, now, "AcceptanceRose", "acceptance rose")
    if _returned(state, inputs, params):
        # The newest captures look like a pooled draft's traffic, not the served one's (draft_return.py): the
        # samples of this round are of the old traffic, and the pool is tried on the new one first.
        return _recollect(replace(state, shift_at=now), inputs, now, "TrafficReturned",
                          f"captured traffic back on {inputs.returned_to}'s domain")
    return None


def _returned(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams) -> bool:
    """A round that captures, whose newest captures are back on a pooled draft's domain: nearer its traffic
    than the served draft's after a promotion, or than the round's own first captures (draft_return.py
    chooses what each round's window is compared with)."""
    return (inputs.returned_to is not None and state.phase in (Phase.COLLECTING, Phase.RECALLING)
            and inputs.returned_to in inputs.pool and pool_to_try(inputs, params))


# Work in these phases is built on samples from before a shift: start over on fresh ones.
_STALE_ON_SHIFT = (Phase.COLLECTING, Phase.RECALLING, Phase.TRAINING, Phase.EVALUATING)


def _recollect(state: LifecycleState, inputs: LifecycleInput, now: float, reason: str = "WorkloadShift",
               what: str = "workload shift") -> Step:
    message = f"{what} in {state.phase.value}: older samples and candidates are stale"
    actions = _cancel_jobs(state, reason, message)
    fresh = replace(
        state,
        active_run=None,
        recall_run=None,
        candidate=None,
        candidate_acceptance_length=None,
        candidate_recalled=False,
        candidate_baseline=None,
        recall_only=False,
        buffer_baseline=inputs.buffer_samples,
        training_preempted=False,  # a preempted run's samples are as stale as the rest
        rollbacks=0,
        retrain_at=None,
        not_better_runs=0,
    )
    step = to_phase(fresh, Phase.COLLECTING, now, reason, message, capture=True)
    return Step((*actions, *step.actions), step.state, step.reason, step.message)


def _cancel_jobs(state: LifecycleState, reason: str, message: str) -> list[act.Action]:
    """The running trainer and recall evaluation Jobs, deleted."""
    return [act.CancelTraining(run, reason, message) for run in (state.active_run, state.recall_run) if run]


def _serving(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    # The rising edge only: a shift signal that outlasts a rejected candidate must not restart
    # collection (TIDE: collection stays off until the *next* shift).
    if inputs.shift_started and params.capture.enabled:
        state = replace(
            state,
            recalled_expected=None,
            recall_shortfall_since=None,
            training_failures=0,
            last_failure_at=None,
            rollbacks=0,
            buffer_baseline=inputs.buffer_samples,
            training_preempted=False,
            retrain_at=None,
            not_better_runs=0,
        )
        return to_phase(state, Phase.COLLECTING, now, "WorkloadShift", "acceptance fell: collecting", capture=True)
    if inputs.rise_started:
        rose = recall_on_rise(state, inputs, params, now)
        if rose is not None:
            return rose
    state = watch_recalled(state, inputs, params, now)
    short = recalled_short(state, inputs, params, now)
    if short is not None:
        return short
    return stay(state, "Serving", "serving the promoted draft", capture=False)


def _pinned(state: LifecycleState, inputs: LifecycleInput, now: float) -> Step:
    actions: list[act.Action] = []
    if state.phase is Phase.CANARY:
        actions.append(act.RollBack(state.candidate or "", "DraftPinned", "spec.draftPin is set", state.canary_pods))
    actions += _cancel_jobs(state, "DraftPinned", "spec.draftPin is set")
    cleared = replace(state, active_run=None, recall_run=None, candidate=None, candidate_acceptance_length=None,
                      candidate_recalled=False, candidate_baseline=None, canary=None, canary_pods=(),
                      canary_alone=False, canary_bands=None, retrain_at=None, recalled_expected=None,
                      recall_shortfall_since=None, recall_only=False)
    message = f"serving pinned draft {inputs.draft_pin}"
    step = to_phase(cleared, Phase.SERVING, now, "DraftPinned", message, capture=False)
    return Step((*actions, *step.actions), step.state, step.reason, step.message)


def _target_changed(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    message = f"target revision {state.target_revision} -> {inputs.target_revision}: drafts invalid, retraining"
    actions: list[act.Action] = [act.ServeDraft(None, "TargetChanged", message)]
    actions += _cancel_jobs(state, "TargetChanged", message)
    actions.append(act.InvalidateArtifacts(inputs.target_revision, "TargetChanged", message))
    fresh = LifecycleState(
        target_revision=inputs.target_revision,
        run_counter=state.run_counter,
        last_run=state.last_run,
        capture_enabled=state.capture_enabled,
    )
    phase = Phase.COLLECTING if params.capture.enabled else Phase.SERVING
    step = to_phase(fresh, phase, now, "TargetChanged", message, capture=params.capture.enabled)
    return Step((*actions, *step.actions), step.state, step.reason, step.message)


_HANDLERS = {
    Phase.SERVING: _serving,
    Phase.COLLECTING: collecting,
    Phase.RECALLING: recalling,
    Phase.TRAINING: training,
    Phase.EVALUATING: evaluating,
    Phase.CANARY: canary_phase,
    Phase.PROMOTED: promoted,
    Phase.ROLLED_BACK: rolled_back,
}
