"""The draft lifecycle: Serving -> Collecting -> Training -> Evaluating -> Canary -> Promoted|RolledBack.

One pure step per reconcile pass: (state, inputs, params, now) -> (actions, new state, why).
Guards: one training run at a time; exponential backoff after a failed run and a give-up after
maxFailures (until the next shift); a minimum interval between promotions; collection stops when
a trained draft no longer beats the served one (TIDE Algorithm 1) and restarts at the next shift,
unless the shift signal is still raised (ShiftPersists: train again on new samples, ever more rarely).
A run after a shift trains on what was captured since the shift (LaunchTraining.captured_since).
The state is plain data (control/lifecycle_types.py), stored in status (control/restart.py), so a
restarted operator resumes where it stopped.
"""

from __future__ import annotations

from dataclasses import replace

from tide_operator.control import actions as act
from tide_operator.control.canary import (
    AnalysisPhase,
    CanaryAnalysis,
    MeasurementResult,
    PodGroupMetrics,
    analysis_phase,
    measure,
    measure_first_draft,
    record,
)
from tide_operator.control.lifecycle_types import (
    CaptureParams,
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    Step,
    TrainingObservation,
    TrainingParams,
    TrainingStatus,
    run_id_for,
    run_number,
)

__all__ = [  # the types are re-exported: callers import the lifecycle from one place
    "CaptureParams", "LifecycleInput", "LifecycleParams", "LifecycleState", "Phase", "Step",
    "TrainingObservation", "TrainingParams", "TrainingStatus", "refuse_candidate", "run_id_for", "run_number",
    "step_lifecycle",
]


# A rolled-back canary may have lost to noise: collect once more, then wait for the next shift.
MAX_CONSECUTIVE_ROLLBACKS = 2


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
    if inputs.shift_started:  # runs from now on claim only what is captured from here on
        state = replace(state, shift_at=now)
    if inputs.draft_pin is not None:
        return _pinned(state, inputs, now)
    if state.phase is Phase.CANARY and inputs.abort_canary:
        return _roll_back(state, now, "CanaryAborted", "control.abortCanary is set")
    if inputs.shift_started and state.phase in _STALE_ON_SHIFT:
        return _recollect(state, inputs, now)
    handler = _HANDLERS[state.phase]
    return handler(state, inputs, params, now)


# Work in these phases is built on samples from before a shift: start over on fresh ones.
_STALE_ON_SHIFT = (Phase.COLLECTING, Phase.TRAINING, Phase.EVALUATING)


def _recollect(state: LifecycleState, inputs: LifecycleInput, now: float) -> Step:
    message = f"workload shift in {state.phase.value}: older samples and candidates are stale"
    actions: list[act.Action] = []
    if state.active_run is not None:
        actions.append(act.CancelTraining(state.active_run, "WorkloadShift", message))
    fresh = replace(
        state,
        active_run=None,
        candidate=None,
        candidate_acceptance_length=None,
        buffer_baseline=inputs.buffer_samples,
        rollbacks=0,
        retrain_at=None,
        not_better_runs=0,
    )
    step = _to(fresh, Phase.COLLECTING, now, "WorkloadShift", message, capture=True)
    return Step((*actions, *step.actions), step.state, step.reason, step.message)


def _serving(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    # The rising edge only: a shift signal that outlasts a rejected candidate must not restart
    # collection (TIDE: collection stays off until the *next* shift).
    if inputs.shift_started and params.capture.enabled:
        state = replace(
            state,
            training_failures=0,
            last_failure_at=None,
            rollbacks=0,
            buffer_baseline=inputs.buffer_samples,
            retrain_at=None,
            not_better_runs=0,
        )
        return _to(state, Phase.COLLECTING, now, "WorkloadShift", "acceptance fell: collecting", capture=True)
    return _stay(state, "Serving", "serving the promoted draft", capture=False)


def _collecting(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    if not params.capture.enabled:
        return _to(
            replace(state, retrain_at=None),
            Phase.SERVING,
            now,
            "CaptureDisabled",
            "spec.control.capture.enabled is false",
            capture=False,
        )
    persists = state.retrain_at is not None  # collecting on after a "not better" verdict (ShiftPersists)
    if persists and not inputs.shift:
        message = "the shift signal cleared after a candidate not better: collection stops until the next shift"
        return _to(replace(state, retrain_at=None), Phase.SERVING, now, "ShiftCleared", message, capture=False)
    threshold = params.training.sample_threshold
    fresh = max(0, inputs.buffer_samples - state.buffer_baseline)
    if fresh < threshold:
        reason = "ShiftPersists" if persists else "Collecting"
        return _stay(state, reason, f"buffer {fresh}/{threshold} new samples", capture=True)
    wait = _backoff_left(state, params.training, now)
    if wait > 0:
        return _stay(
            state,
            "TrainingBackoff",
            f"{wait:.0f}s of backoff after {state.training_failures} failures",
            capture=True,
        )
    if state.retrain_at is not None and now < state.retrain_at:
        message = f"{state.retrain_at - now:.0f}s until training again ({state.not_better_runs} not better in a row)"
        return _stay(state, "ShiftPersists", message, capture=True)
    return _launch(state, params, now, f"buffer {fresh} >= {threshold} new samples")


def _launch(state: LifecycleState, params: LifecycleParams, now: float, why: str) -> Step:
    """A run on the captures since the current shift (all of the buffer's newest window without one)."""
    run_id = run_id_for(state.run_counter + 1, params.deployment_uid)
    since = "" if state.shift_at is None else f" on the captures since the shift {now - state.shift_at:.0f}s ago"
    message = f"{why}: training {run_id}{since}"
    reason = "ShiftPersists" if state.retrain_at is not None else "SampleThresholdReached"
    launched = replace(state, run_counter=state.run_counter + 1, active_run=run_id, last_run=run_id,
                       buffer_baseline=0, retrain_at=None)
    step = _to(launched, Phase.TRAINING, now, reason, message, capture=True)
    return _with(step, act.LaunchTraining(run_id, step.reason, message, captured_since=state.shift_at))


def _training(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    seen = inputs.training
    if seen is None or seen.run_id != state.active_run or seen.status is TrainingStatus.RUNNING:
        return _stay(state, "TrainingRunning", f"waiting for run {state.active_run}", capture=True)
    if seen.status is TrainingStatus.NOT_BETTER:
        return _not_better(state, seen, inputs, params, now)
    if seen.status is TrainingStatus.SUCCEEDED and seen.candidate_acceptance_length is not None:
        done = replace(
            state,
            active_run=None,
            candidate=seen.run_id,
            candidate_acceptance_length=seen.candidate_acceptance_length,
            training_failures=0,
            last_failure_at=None,
            not_better_runs=0,
        )
        message = f"run {seen.run_id}: eval acceptance_length={seen.candidate_acceptance_length:.3f}"
        return _to(done, Phase.EVALUATING, now, "TrainingSucceeded", message, capture=True)
    failures = state.training_failures + 1
    failed = replace(state, active_run=None, training_failures=failures, last_failure_at=now)
    outcome = _FAILURE_OUTCOMES.get(seen.status, seen.status.value)
    message = f"run {seen.run_id} {outcome} ({failures}/{params.training.max_failures})"
    if failures >= params.training.max_failures:
        return _to(
            failed,
            Phase.SERVING,
            now,
            "TrainingGaveUp",
            message + ": waiting for the next shift",
            capture=False,
        )
    reason = _FAILURE_REASONS.get(seen.status, "TrainingFailed")
    return _to(failed, Phase.COLLECTING, now, reason, message, capture=True)


_FAILURE_OUTCOMES = {
    TrainingStatus.SUCCEEDED: "succeeded without an evaluation report",
    TrainingStatus.DEADLINE_EXCEEDED: "ran past its deadline (control.training.timeout) and was stopped",
    TrainingStatus.NO_GPU: ("failed: no GPU visible to the trainer (exit 8); the training image must match the "
                            "GPU vendor (CUDA for NVIDIA, ROCm for AMD: operator config trainer.vendorImages) "
                            "and the node's device plugin must expose its GPUs"),
}
_FAILURE_REASONS = {TrainingStatus.DEADLINE_EXCEEDED: "TrainingDeadlineExceeded",
                    TrainingStatus.NO_GPU: "TrainingNoGpu"}


def _not_better(state: LifecycleState, seen: TrainingObservation, inputs: LifecycleInput, params: LifecycleParams,
                now: float) -> Step:
    """The trainer judged its own candidate no better (exit 7).

    A decision, not a failure: no failure is counted and no backoff applies.
    """
    numbers = ""
    if seen.candidate_acceptance_length is not None and seen.served_acceptance_length is not None:
        numbers = (f": candidate acceptance_length={seen.candidate_acceptance_length:.3f}"
                   f" vs served {seen.served_acceptance_length:.3f}")
    done = replace(state, active_run=None, training_failures=0, last_failure_at=None)
    return _judged_not_better(done, inputs, params, now, f"run {seen.run_id} not better than the served draft{numbers}")


def _judged_not_better(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float,
                       verdict: str) -> Step:
    """TIDE Algorithm 1 stops collecting once a trained draft no longer beats the served one.

    But while the shift signal is still raised the traffic is still the new one and the served draft
    still bad on it: collection goes on (ShiftPersists) and a new run starts once sampleThreshold
    samples arrived since this verdict, no sooner than minPromotionInterval after it, doubled for each
    verdict in a row, so a signal that never clears cannot retrain in a tight loop. When the signal
    clears first, collection stops (ShiftCleared).
    """
    if not (inputs.shift and params.capture.enabled):
        return _to(state, Phase.SERVING, now, "CandidateNotBetter", verdict + "; collection stops until the next shift",
                   capture=False)
    runs = state.not_better_runs + 1
    wait = params.canary.min_promotion_interval_s * 2.0 ** (runs - 1)
    persisting = replace(state, buffer_baseline=inputs.buffer_samples, retrain_at=now + wait, not_better_runs=runs)
    message = (f"{verdict}; the shift persists: collecting {params.training.sample_threshold} new samples, "
               f"training again in {wait:.0f}s at the earliest")
    return _to(persisting, Phase.COLLECTING, now, "ShiftPersists", message, capture=True)


def _evaluating(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    assert state.candidate is not None
    assert state.candidate_acceptance_length is not None
    report = inputs.training if inputs.training and inputs.training.run_id == state.candidate else None
    # The report's baseline (served draft on the same held-out data) beats a live number; with no
    # served draft the baseline is 1.0, what decoding without speculation yields per step.
    baseline = 1.0
    if report is not None and report.served_acceptance_length is not None:
        baseline = report.served_acceptance_length
    elif inputs.served_acceptance_length is not None:
        baseline = inputs.served_acceptance_length
    numbers = (
        f"candidate {state.candidate} acceptance_length={state.candidate_acceptance_length:.3f}"
        f" vs served {baseline:.3f}"
    )
    if state.candidate_acceptance_length <= baseline:
        rejected = replace(state, candidate=None, candidate_acceptance_length=None)
        return _judged_not_better(rejected, inputs, params, now, numbers)
    if state.last_promotion_at is not None:
        wait = state.last_promotion_at + params.canary.min_promotion_interval_s - now
        if wait > 0:
            return _stay(state, "PromotionIntervalNotElapsed", f"{numbers}; {wait:.0f}s to wait", capture=True)
    # The canary pods are chosen here and kept in the state: the rollback swaps back exactly these.
    pods = tuple(sorted(inputs.ready_pods)[:params.canary.replicas])
    started = replace(state, canary=CanaryAnalysis(started_at=now), canary_pods=pods)
    message = numbers + ": canary on " + (", ".join(pods) or "no ready pod")
    step = _to(started, Phase.CANARY, now, "CandidateBetter", message, capture=True)
    return _with(step, act.StartCanary(state.candidate, params.canary.replicas, step.reason, step.message, pods))


def _canary(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    assert state.canary is not None
    assert state.candidate is not None
    candidate, analysis = state.candidate, state.canary
    if analysis.due(params.canary, now):
        control = inputs.control or PodGroupMetrics(None, None)
        if control.acceptance_length is None:
            # Control pods not speculating: compare with the served draft's remembered length.
            control = PodGroupMetrics(inputs.served_acceptance_length, control.generation_throughput)
        canary = inputs.canary or PodGroupMetrics(None, None)
        analysis = record(analysis, _measurement(canary, control, inputs, params, analysis), canary, now, control)
    state = replace(state, canary=analysis)
    counts = f"successful={analysis.successful} failed={analysis.failed} inconclusive={analysis.inconclusive}"
    if inputs.first_draft:
        counts = f"first draft, judged by modelled speedup and throughput: {counts}"
    verdict = analysis_phase(analysis, params.canary, now)
    if verdict is AnalysisPhase.RUNNING:
        return _stay(state, "CanaryRunning", counts, capture=True)
    if verdict is not AnalysisPhase.SUCCESSFUL:
        return _roll_back(state, now, f"Canary{verdict.value}", counts)
    promoted = replace(
        state,
        last_promotion_at=now,
        promoted_acceptance_length=analysis.mean_canary_length,
        promoted_acceptance=analysis.mean_canary_acceptance,
        candidate=None,
        candidate_acceptance_length=None,
        canary=None,
        canary_pods=(),
        rollbacks=0,
        last_canary_reason="CanarySuccessful",
        last_canary_message=f"{candidate} promoted: {counts}",
    )
    step = _to(promoted, Phase.PROMOTED, now, "CanarySuccessful", counts, capture=True)
    return _with(step, act.Promote(candidate, step.reason, counts))


def _measurement(canary: PodGroupMetrics, control: PodGroupMetrics, inputs: LifecycleInput,
                 params: LifecycleParams, analysis: CanaryAnalysis) -> MeasurementResult:
    """Against the served draft, on the analysis' measured noise; a first draft (nothing served but the
    bootstrap head at K=0) on its own."""
    if inputs.first_draft:
        return measure_first_draft(canary, control, inputs.batch_size, params.canary, params.first_draft)
    return measure(canary, control, params.canary, analysis)


def _promoted(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    # TIDE keeps collecting after a deploy: gains continue until a new draft stops beating the old.
    return _to(
        state,
        Phase.COLLECTING,
        now,
        "Collecting",
        "promoted; collecting for the next round",
        capture=params.capture.enabled,
    )


def _rolled_back(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    if state.rollbacks < MAX_CONSECUTIVE_ROLLBACKS and params.capture.enabled:
        return _to(
            state,
            Phase.COLLECTING,
            now,
            "Collecting",
            "rolled back; collecting for another candidate",
            capture=True,
        )
    return _to(
        state,
        Phase.SERVING,
        now,
        "Serving",
        f"{state.rollbacks} rollbacks in a row; collection stops until the next shift",
        capture=False,
    )


def refuse_candidate(state: LifecycleState, reason: str, message: str, now: float) -> Step:
    """The registry or the pods refused the candidate's files (checksum, manifest, target revision).

    Its bytes will not change by retrying, so it is rolled back like a failed canary (the pointer
    never moved) and counts as a rollback: collect once more, then wait for the next shift.
    """
    if state.candidate is None or state.phase not in (Phase.EVALUATING, Phase.CANARY):
        return _stay(state, reason, message, capture=state.capture_enabled)
    return _roll_back(state, now, reason, message)


def _roll_back(state: LifecycleState, now: float, reason: str, message: str) -> Step:
    candidate = state.candidate or ""
    back = replace(state, candidate=None, candidate_acceptance_length=None, canary=None, canary_pods=(),
                   rollbacks=state.rollbacks + 1, last_canary_reason=reason,
                   last_canary_message=f"{candidate} rolled back: {message}")
    step = _to(back, Phase.ROLLED_BACK, now, reason, message, capture=state.capture_enabled)
    return _with(step, act.RollBack(candidate, reason, message, state.canary_pods))


def _pinned(state: LifecycleState, inputs: LifecycleInput, now: float) -> Step:
    actions: list[act.Action] = []
    if state.phase is Phase.CANARY:
        actions.append(act.RollBack(state.candidate or "", "DraftPinned", "spec.draftPin is set", state.canary_pods))
    if state.active_run is not None:
        actions.append(act.CancelTraining(state.active_run, "DraftPinned", "spec.draftPin is set"))
    cleared = replace(state, active_run=None, candidate=None, candidate_acceptance_length=None, canary=None,
                      canary_pods=(), retrain_at=None)
    step = _to(cleared, Phase.SERVING, now, "DraftPinned", f"serving pinned draft {inputs.draft_pin}", capture=False)
    return Step((*actions, *step.actions), step.state, step.reason, step.message)


def _target_changed(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    message = f"target revision {state.target_revision} -> {inputs.target_revision}: drafts invalid, retraining"
    actions: list[act.Action] = [act.ServeDraft(None, "TargetChanged", message)]
    if state.active_run is not None:
        actions.append(act.CancelTraining(state.active_run, "TargetChanged", message))
    actions.append(act.InvalidateArtifacts(inputs.target_revision, "TargetChanged", message))
    fresh = LifecycleState(
        target_revision=inputs.target_revision,
        run_counter=state.run_counter,
        last_run=state.last_run,
        capture_enabled=state.capture_enabled,
    )
    phase = Phase.COLLECTING if params.capture.enabled else Phase.SERVING
    step = _to(fresh, phase, now, "TargetChanged", message, capture=params.capture.enabled)
    return Step((*actions, *step.actions), step.state, step.reason, step.message)


def _backoff_left(state: LifecycleState, training: TrainingParams, now: float) -> float:
    if state.training_failures == 0 or state.last_failure_at is None:
        return 0.0
    backoff = training.backoff_s * float(2 ** (state.training_failures - 1))
    return max(0.0, state.last_failure_at + backoff - now)


def _to(state: LifecycleState, phase: Phase, now: float, reason: str, message: str, *, capture: bool) -> Step:
    moved = replace(state, phase=phase, phase_since=now if phase is not state.phase else state.phase_since)
    return _stay(moved, reason, message, capture=capture)


def _stay(state: LifecycleState, reason: str, message: str, *, capture: bool) -> Step:
    """Keep the phase; emit SetCapture only when the capture setting actually changes."""
    if state.capture_enabled == capture:
        return Step((), state, reason, message)
    changed = replace(state, capture_enabled=capture)
    return Step((act.SetCapture(capture, reason, message),), changed, reason, message)


def _with(step: Step, action: act.Action) -> Step:
    return Step((*step.actions, action), step.state, step.reason, step.message)


_HANDLERS = {
    Phase.SERVING: _serving,
    Phase.COLLECTING: _collecting,
    Phase.TRAINING: _training,
    Phase.EVALUATING: _evaluating,
    Phase.CANARY: _canary,
    Phase.PROMOTED: _promoted,
    Phase.ROLLED_BACK: _rolled_back,
}
