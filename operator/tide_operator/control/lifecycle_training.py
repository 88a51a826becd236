"""The draft lifecycle's training side: Collecting -> Training, and what a run's outcome leads to.

Guards: one training run at a time; exponential backoff after a failed run and a give-up after
maxFailures (until the next shift). A run after a shift trains on what was captured since the shift
(LaunchTraining.captured_since). A "not better" verdict stops collection (TIDE Algorithm 1) unless
the shift signal is still raised (ShiftPersists: train again on new samples, ever more rarely).

Capture runs while Collecting only. Once a run launches it has its samples; what it captured after
would feed only a next round, and whether one follows is the verdict's to say (a "not better" stops
collection), so capture pauses while the run trains and its candidate is judged (Evaluating, Canary)
and the next round collects its own sampleThreshold after the verdict. Capture costs serving
throughput (the policy bench charges 2%); paid through every run and canary it bought samples that
were discarded or pruned, and in the bench's high-load phases (where the table drafts nothing) it
was the difference between 0.975 and 0.99 of no speculation.
"""

from __future__ import annotations

from dataclasses import replace

from tide_operator.control import actions as act
from tide_operator.control.lifecycle_recall import collecting_to_recall, launch_recall, recall_due
from tide_operator.control.lifecycle_types import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    Step,
    TrainingObservation,
    TrainingParams,
    TrainingStatus,
    run_id_for,
    stay,
    to_phase,
    with_action,
)


def collecting(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    if not params.capture.enabled:
        return to_phase(
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
        return to_phase(replace(state, retrain_at=None), Phase.SERVING, now, "ShiftCleared", message, capture=False)
    fresh = max(0, inputs.buffer_samples - state.buffer_baseline)
    if state.recall_only:  # acceptance rose: the pool is tried, nothing trained
        return collecting_to_recall(state, inputs, params, now, fresh)
    if not persists and recall_due(state, inputs, params, fresh):  # the pool before a training run
        return launch_recall(state, inputs, params, now, fresh)
    return _train_when_ready(state, params, now, fresh, persists, inputs.training_deferred)


def _train_when_ready(state: LifecycleState, params: LifecycleParams, now: float, fresh: int,
                      persists: bool, deferred: str | None = None) -> Step:
    """A run once sampleThreshold new samples arrived, no backoff is left, no ShiftPersists wait, and the
    fleet does not hold training (its GPUs serve more than the run would add, control/fleet.py)."""
    threshold = params.training.sample_threshold
    if state.training_preempted:
        fresh = max(fresh, threshold)  # the preempted run's samples, still in the buffer
    if fresh < threshold:
        reason = "ShiftPersists" if persists else "Collecting"
        return stay(state, reason, f"buffer {fresh}/{threshold} new samples", capture=True)
    wait = _backoff_left(state, params.training, now)
    if wait > 0:
        return stay(
            state,
            "TrainingBackoff",
            f"{wait:.0f}s of backoff after {state.training_failures} failures",
            capture=True,
        )
    if state.retrain_at is not None and now < state.retrain_at:
        message = f"{state.retrain_at - now:.0f}s until training again ({state.not_better_runs} not better in a row)"
        return stay(state, "ShiftPersists", message, capture=True)
    if deferred is not None:
        return stay(state, "TrainingDeferred", f"buffer {fresh} >= {threshold} new samples; {deferred}", capture=True)
    return _launch(state, params, now, f"buffer {fresh} >= {threshold} new samples")


def _launch(state: LifecycleState, params: LifecycleParams, now: float, why: str) -> Step:
    """A run on the captures since the current shift (all of the buffer's newest window without one)."""
    run_id = run_id_for(state.run_counter + 1, params.deployment_uid)
    since = "" if state.shift_at is None else f" on the captures since the shift {now - state.shift_at:.0f}s ago"
    message = f"{why}: training {run_id}{since}"
    reason = "ShiftPersists" if state.retrain_at is not None else "SampleThresholdReached"
    # A shift trained for is not recalled for afterwards: the pool had its chance before this run (or had
    # nothing to offer), and what this run promotes beat what served; the next shift tries the pool again.
    launched = replace(state, run_counter=state.run_counter + 1, active_run=run_id, last_run=run_id,
                       buffer_baseline=0, retrain_at=None, recalled_for_shift=state.shift_at, training_preempted=False)
    # The run has its samples: capture pauses until the verdict (module docstring).
    step = to_phase(launched, Phase.TRAINING, now, reason, message, capture=False)
    return with_action(step, act.LaunchTraining(run_id, step.reason, message, captured_since=state.shift_at))


def training(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    seen = inputs.training
    if seen is None or seen.run_id != state.active_run or seen.status is TrainingStatus.RUNNING:
        if inputs.training_deferred is not None and state.active_run is not None:
            return _preempt(state, state.active_run, inputs.training_deferred, now)
        return stay(state, "TrainingRunning", f"waiting for run {state.active_run}", capture=False)
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
        return to_phase(done, Phase.EVALUATING, now, "TrainingSucceeded", message, capture=False)
    failures = state.training_failures + 1
    failed = replace(state, active_run=None, training_failures=failures, last_failure_at=now)
    outcome = _FAILURE_OUTCOMES.get(seen.status, seen.status.value)
    message = f"run {seen.run_id} {outcome} ({failures}/{params.training.max_failures})"
    if failures >= params.training.max_failures:
        return to_phase(
            failed,
            Phase.SERVING,
            now,
            "TrainingGaveUp",
            message + ": waiting for the next shift",
            capture=False,
        )
    reason = _FAILURE_REASONS.get(seen.status, "TrainingFailed")
    return to_phase(failed, Phase.COLLECTING, now, reason, message, capture=True)


def _preempt(state: LifecycleState, run: str, why: str, now: float) -> Step:
    """The fleet needs the training GPUs for serving (the run would not pay at this load): cancel the run,
    keep its samples for the next, which launches once training pays again."""
    preempted = replace(state, active_run=None, training_preempted=True)
    message = f"run {run} cancelled: {why}"
    step = to_phase(preempted, Phase.COLLECTING, now, "TrainingPreempted", message, capture=True)
    return with_action(step, act.CancelTraining(run, step.reason, message))


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
    return judged_not_better(done, inputs, params, now, f"run {seen.run_id} not better than the served draft{numbers}")


def judged_not_better(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float,
                       verdict: str) -> Step:
    """TIDE Algorithm 1 stops collecting once a trained draft no longer beats the served one.

    But while the shift signal is still raised the traffic is still the new one and the served draft
    still bad on it: collection goes on (ShiftPersists) and a new run starts once sampleThreshold
    samples arrived since this verdict, no sooner than minPromotionInterval after it, doubled for each
    verdict in a row, so a signal that never clears cannot retrain in a tight loop. When the signal
    clears first, collection stops (ShiftCleared).
    """
    if not (inputs.shift and params.capture.enabled):
        stops = verdict + "; collection stops until the next shift"
        return to_phase(state, Phase.SERVING, now, "CandidateNotBetter", stops, capture=False)
    runs = state.not_better_runs + 1
    wait = params.canary.min_promotion_interval_s * 2.0 ** (runs - 1)
    persisting = replace(state, buffer_baseline=inputs.buffer_samples, retrain_at=now + wait, not_better_runs=runs,
                         training_preempted=False)
    message = (f"{verdict}; the shift persists: collecting {params.training.sample_threshold} new samples, "
               f"training again in {wait:.0f}s at the earliest")
    return to_phase(persisting, Phase.COLLECTING, now, "ShiftPersists", message, capture=True)



def _backoff_left(state: LifecycleState, training: TrainingParams, now: float) -> float:
    if state.training_failures == 0 or state.last_failure_at is None:
        return 0.0
    backoff = training.backoff_s * float(2 ** (state.training_failures - 1))
    return max(0.0, state.last_failure_at + backoff - now)


def seconds_to_job(state: LifecycleState, params: LifecycleParams, buffer_samples: int, pool: tuple[str, ...],
                   now: float, samples_per_s: float, training_deferred: bool = False) -> float | None:
    """When collecting() launches its next Job (the pool's evaluation or a training run) at this capture
    rate: the fleet drains lent replicas off the training class that long ahead (control/fleet.py).
    None while no Job is foreseen: not collecting, no samples arriving, or training held by the fleet."""
    if state.phase is not Phase.COLLECTING or not params.capture.enabled or samples_per_s <= 0:
        return None
    fresh = max(0, buffer_samples - state.buffer_baseline)
    recall = params.recall.sample_threshold
    pending = LifecycleInput(shift=True, buffer_samples=buffer_samples, served_acceptance_length=None,
                             target_revision=state.target_revision or "", pool=pool)
    if state.retrain_at is None and recall_due(state, pending, params, max(fresh, recall)):
        return max(0, recall - fresh) / samples_per_s  # the pool is tried first, once its samples are in
    if state.recall_only or training_deferred:
        return None  # a rise is only ever scored against the pool, and that was tried
    need = 0 if state.training_preempted else params.training.sample_threshold
    wait = max(0, need - fresh) / samples_per_s
    retrain = state.retrain_at - now if state.retrain_at is not None else 0.0
    return max(wait, _backoff_left(state, params.training, now), retrain)
