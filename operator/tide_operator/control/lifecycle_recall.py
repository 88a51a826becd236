"""The draft lifecycle's recall side (issue 16): the draft pool before a training run.

Real traffic comes back: code by day, chat at night. On a shift, once a few samples of the new
traffic are captured (recallSampleThreshold, a fraction of a training round's), an evaluation Job
scores the served draft and every other draft of the pool on them (Recalling). The best pooled
draft that beats the served one by the canary's margin goes to the canary as it is (Evaluating,
then Canary; promoted, it keeps its version); training starts only when none does, from the samples
captured meanwhile (capture never stops while Recalling).

Why recall first, whatever the pool: an evaluation costs a few minutes of one training GPU and no
serving capacity, a training round tens of minutes and its canary; a hit saves the round, a miss
delays nothing (training waits for sampleThreshold samples anyway, and they keep arriving). The pool
is tried once per shift.

A shift is seen as a fall of acceptance; traffic returning to a domain the served draft knows better
(home after an excursion) raises it, and the served draft, adapted to the excursion, may have forgotten
part of home that a pooled draft still knows. So a rise of acceptance tries the pool too (recall_only):
the same evaluation, but whatever it says nothing is trained, since the served draft already does
better than before; without a winner the loop goes back to Serving.

A recalled draft is served without a training round after it. If its live acceptance length stays
short of its evaluation by more than shortfallPercent for two canary analysis windows, it was not
the domain's draft after all: collection starts and training follows.
"""

from __future__ import annotations

from dataclasses import replace

from tide_operator.control import actions as act
from tide_operator.control.lifecycle_types import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    Step,
    TrainingStatus,
    run_id_for,
    stay,
    to_phase,
    with_action,
)


def recall_due(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, fresh: int) -> bool:
    """A shift not yet tried against the pool, other drafts to try, enough of its samples to score on."""
    return (params.recall.enabled and bool(inputs.pool) and state.shift_at is not None
            and state.recalled_for_shift != state.shift_at and fresh >= params.recall.sample_threshold)


def pool_to_try(inputs: LifecycleInput, params: LifecycleParams) -> bool:
    """Other drafts in the pool, and capture and recall on to score them."""
    return params.capture.enabled and params.recall.enabled and bool(inputs.pool)


def recall_on_rise(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams,
                   now: float) -> Step | None:
    """Serving, acceptance rose: collect recallSampleThreshold samples of the new traffic for the pool's
    evaluation (nothing to try, capture or the pool off: None, keep serving)."""
    if not pool_to_try(inputs, params):
        return None
    rose = replace(state, shift_at=now, recall_only=True, buffer_baseline=inputs.buffer_samples, retrain_at=None,
                   recalled_expected=None, recall_shortfall_since=None, training_preempted=False)
    message = (f"acceptance rose: the traffic changed; collecting {params.recall.sample_threshold} samples to score "
               f"the draft pool ({', '.join(inputs.pool)}) on it, no training")
    return to_phase(rose, Phase.COLLECTING, now, "AcceptanceRose", message, capture=True)


def collecting_to_recall(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float,
                         fresh: int) -> Step:
    """Collecting after a rise (recall_only): the evaluation once its samples are in, never a training run."""
    if recall_due(state, inputs, params, fresh):
        return launch_recall(state, inputs, params, now, fresh)
    if not pool_to_try(inputs, params) or state.recalled_for_shift == state.shift_at:
        return back_to_serving(state, now, "RecallNothingToTry", "no pooled draft to score: serving")
    message = f"buffer {fresh}/{params.recall.sample_threshold} samples for the draft pool's evaluation"
    return stay(state, "CollectingForRecall", message, capture=True)


def back_to_serving(state: LifecycleState, now: float, reason: str, message: str) -> Step:
    """The end of a rise's recall without a promotion: acceptance rose, so there is nothing to train for."""
    return to_phase(replace(state, recall_only=False), Phase.SERVING, now, reason, message, capture=False)


def launch_recall(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float,
                  fresh: int) -> Step:
    run_id = run_id_for(state.run_counter + 1, params.deployment_uid)
    message = (f"{fresh} samples since the shift: scoring the draft pool ({', '.join(inputs.pool)}) "
               f"before any training, evaluation {run_id}")
    launched = replace(state, run_counter=state.run_counter + 1, recall_run=run_id, last_run=run_id,
                       recalled_for_shift=state.shift_at)
    # Capture goes on: if no pooled draft wins, the training run needs the shift's samples.
    step = to_phase(launched, Phase.RECALLING, now, "RecallEvaluating", message, capture=True)
    return with_action(step, act.LaunchRecall(run_id, inputs.pool, step.reason, message,
                                              captured_since=state.shift_at))


def recalling(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    seen = inputs.recall
    if seen is None or seen.run_id != state.recall_run or seen.status is TrainingStatus.RUNNING:
        return stay(state, "RecallEvaluating", f"waiting for evaluation {state.recall_run}", capture=True)
    done = replace(state, recall_run=None)
    if seen.status is not TrainingStatus.SUCCEEDED or seen.served_acceptance_length is None:
        if state.recall_only:
            return back_to_serving(done, now, "RecallFailed", f"evaluation {seen.run_id} "
                                   f"{seen.status.value.lower()}: acceptance rose, serving on")
        message = f"evaluation {seen.run_id} {seen.status.value.lower()}: training on the shift's samples instead"
        return to_phase(done, Phase.COLLECTING, now, "RecallFailed", message, capture=True)
    served, best = seen.served_acceptance_length, seen.best_acceptance_length
    needed = served * (1 + params.canary.min_acceptance_length_gain_percent / 100)
    if seen.best_version is None or best is None or best < needed:
        scored = "no pooled draft scored" if best is None else f"best {seen.best_version} {best:.3f}"
        if state.recall_only:
            return back_to_serving(done, now, "RecallNotBetter", f"evaluation {seen.run_id}: {scored} vs served "
                                   f"{served:.3f} (needs {needed:.3f}): acceptance rose, serving on")
        message = (f"evaluation {seen.run_id}: {scored} vs served {served:.3f} (needs {needed:.3f}): "
                   "training on the shift's samples")
        return to_phase(done, Phase.COLLECTING, now, "RecallNotBetter", message, capture=True)
    recalled = replace(done, candidate=seen.best_version, candidate_acceptance_length=best,
                       candidate_recalled=True, candidate_baseline=served)
    message = f"evaluation {seen.run_id}: recalling {seen.best_version} ({best:.3f} vs served {served:.3f})"
    return to_phase(recalled, Phase.EVALUATING, now, "DraftRecalled", message, capture=False)


def after_recall_promotion(state: LifecycleState, params: LifecycleParams, now: float) -> Step:
    """A recalled draft serves without a training round after it (Promoted -> Serving)."""
    state = replace(state, recall_only=False)
    message = f"recalled draft serving; training only if live acceptance stays {params.recall.shortfall_percent:g}% " \
              f"below its evaluation {state.recalled_expected:.3f}"
    return to_phase(state, Phase.SERVING, now, "RecalledDraftServing", message, capture=False)


def recalled_short(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams,
                   now: float) -> Step | None:
    """Serving a recalled draft: Collecting once live acceptance stayed short of its evaluation for two
    analysis windows; None while it holds up (the state's shortfall clock is kept by ``watch_recalled``)."""
    since = state.recall_shortfall_since
    if since is None or now - since < 2 * params.canary.analysis_window_s:
        return None
    message = (f"recalled draft's live acceptance length {inputs.served_acceptance_length:.3f} stayed below its "
               f"evaluation {state.recalled_expected:.3f} by more than {params.recall.shortfall_percent:g}% "
               f"for {now - since:.0f}s: collecting to train")
    short = replace(state, recalled_expected=None, recall_shortfall_since=None,
                    buffer_baseline=inputs.buffer_samples, training_preempted=False)
    return to_phase(short, Phase.COLLECTING, now, "RecalledDraftShort", message, capture=params.capture.enabled)


def watch_recalled(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams,
                   now: float) -> LifecycleState:
    """Start or reset the shortfall clock of a recalled draft from this pass's live acceptance length."""
    live = inputs.served_acceptance_length
    if state.recalled_expected is None or live is None:
        return state
    short = live < state.recalled_expected * (1 - params.recall.shortfall_percent / 100)
    if not short:
        return replace(state, recall_shortfall_since=None) if state.recall_shortfall_since is not None else state
    return state if state.recall_shortfall_since is not None else replace(state, recall_shortfall_since=now)
