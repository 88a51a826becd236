"""The draft lifecycle's candidate side: Evaluating -> Canary -> Promoted | RolledBack.

A candidate must beat the served draft on held-out data (TIDE Algorithm 1), wait out the minimum
interval between promotions, then pass a canary analysis on live traffic (control/canary.py). A
failed or inconclusive analysis, or files the registry or the pods refuse, roll back exactly the
canary pods (but an inconclusive one with a positive mean gain promotes a draft recalled from the pool,
whose evaluation was a paired comparison: _recalled_holds); after MAX_CONSECUTIVE_ROLLBACKS in a
row collection waits for the next shift.
Capture stays off while a candidate is judged (lifecycle_training.py: the run has its samples);
Promoted and RolledBack collect again.
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
from tide_operator.control.lifecycle_recall import after_recall_promotion, back_to_serving
from tide_operator.control.lifecycle_training import judged_not_better
from tide_operator.control.lifecycle_types import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    Step,
    stay,
    to_phase,
    with_action,
)

# A rolled-back canary may have lost to noise: collect once more, then wait for the next shift.
MAX_CONSECUTIVE_ROLLBACKS = 2


def evaluating(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    assert state.candidate is not None
    assert state.candidate_acceptance_length is not None
    report = inputs.training if inputs.training and inputs.training.run_id == state.candidate else None
    # The report's baseline (served draft on the same held-out data) beats a live number; with no
    # served draft the baseline is 1.0, what decoding without speculation yields per step.
    baseline = 1.0
    if state.candidate_baseline is not None:  # a recalled draft: the served one on the same samples
        baseline = state.candidate_baseline
    elif report is not None and report.served_acceptance_length is not None:
        baseline = report.served_acceptance_length
    elif inputs.served_acceptance_length is not None:
        baseline = inputs.served_acceptance_length
    numbers = (
        f"candidate {state.candidate} acceptance_length={state.candidate_acceptance_length:.3f}"
        f" vs served {baseline:.3f}"
    )
    if state.candidate_acceptance_length <= baseline:
        rejected = replace(state, candidate=None, candidate_acceptance_length=None, candidate_recalled=False,
                           candidate_baseline=None)
        return judged_not_better(rejected, inputs, params, now, numbers)
    if state.last_promotion_at is not None:
        wait = state.last_promotion_at + params.canary.min_promotion_interval_s - now
        if wait > 0:
            return stay(state, "PromotionIntervalNotElapsed", f"{numbers}; {wait:.0f}s to wait", capture=False)
    # The canary pods are chosen here and kept in the state: the rollback swaps back exactly these.
    pods = tuple(sorted(inputs.ready_pods)[:params.canary.replicas])
    # The fleet does not speculate: the canary pods do, with the candidate, or they would measure nothing.
    alone = inputs.canary_alone and not inputs.first_draft
    bands = inputs.canary_bands if alone else None
    started = replace(state, canary=CanaryAnalysis(started_at=now), canary_pods=pods, canary_alone=alone,
                      canary_bands=bands)
    message = numbers + ": canary on " + (", ".join(pods) or "no ready pod")
    if alone:
        message += " (speculating with the candidate: the fleet does not speculate)"
    step = to_phase(started, Phase.CANARY, now, "CandidateBetter", message, capture=False)
    return with_action(step, act.StartCanary(state.candidate, params.canary.replicas, step.reason, step.message, pods,
                                             speculate=alone, tokens_per_batch_size=bands,
                                             recalled=state.candidate_recalled))


def canary_phase(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    assert state.canary is not None
    assert state.candidate is not None
    candidate, analysis = state.candidate, state.canary
    if analysis.due(params.canary, now):
        control = inputs.control or PodGroupMetrics(None, None)
        if control.acceptance_length is None:
            # Control pods not speculating: compare with the served draft's remembered length.
            control = PodGroupMetrics(inputs.served_acceptance_length, control.generation_throughput)
        canary = inputs.canary or PodGroupMetrics(None, None)
        result = _measurement(canary, control, inputs, params, analysis, alone=state.canary_alone)
        analysis = record(analysis, result, canary, now, control)
    state = replace(state, canary=analysis)
    counts = f"successful={analysis.successful} failed={analysis.failed} inconclusive={analysis.inconclusive}"
    if inputs.first_draft:
        counts = f"first draft, judged by modelled speedup and throughput: {counts}"
    elif state.canary_alone:
        counts = f"the fleet does not speculate; judged by modelled speedup and throughput: {counts}"
    verdict = analysis_phase(analysis, params.canary, now)
    if verdict is AnalysisPhase.RUNNING:
        return stay(state, "CanaryRunning", counts, capture=False)
    if verdict is not AnalysisPhase.SUCCESSFUL and not _recalled_holds(state, analysis, verdict):
        return roll_back(state, now, f"Canary{verdict.value}", counts)
    if verdict is not AnalysisPhase.SUCCESSFUL:
        gains = analysis.length_gains
        counts += (f"; a recalled draft: its evaluation decides, the live mean gain was "
                   f"{100 * sum(gains) / len(gains):+.1f}%")
    recalled = state.candidate_recalled
    promoted = replace(
        state,
        last_promotion_at=now,
        # A recalled draft is watched against its evaluation instead of retrained (lifecycle_recall.py).
        recalled_expected=state.candidate_acceptance_length if recalled else None,
        recall_shortfall_since=None,
        candidate_recalled=False,
        candidate_baseline=None,
        promoted_acceptance_length=analysis.mean_canary_length,
        promoted_acceptance=analysis.mean_canary_acceptance,
        candidate=None,
        candidate_acceptance_length=None,
        canary=None,
        canary_pods=(),
        canary_alone=False,
        canary_bands=None,
        rollbacks=0,
        last_canary_reason="CanarySuccessful",
        last_canary_message=f"{candidate} promoted: {counts}",
    )
    step = to_phase(promoted, Phase.PROMOTED, now, "CanarySuccessful", counts, capture=False)
    evidence = counts
    if recalled:  # the history's `recalled` entry carries the evaluation it was recalled on
        evidence = (f"recalled from the draft pool: evaluation acceptance_length="
                    f"{state.candidate_acceptance_length:.3f} vs served {state.candidate_baseline or 1.0:.3f}; "
                    f"canary {counts}")
    return with_action(step, act.Promote(candidate, step.reason, evidence, recalled=recalled))


def _recalled_holds(state: LifecycleState, analysis: CanaryAnalysis, verdict: AnalysisPhase) -> bool:
    """A recalled draft whose canary saw no loss: Inconclusive promotes it. Its gain was measured on the same
    captured requests as the served draft's (the pool's evaluation, a paired comparison), and it served
    before; the canary compares two pods on different requests, whose noise can hide that gain (the whole
    loop on two CPU pods: v1 scored 3.635 against v2's 3.428 on the returned code, and its 100 s canary saw
    one success and four inconclusive differences). A recalled draft that then serves short of its
    evaluation is retrained (lifecycle_recall.recalled_short), which is the live check that can wait."""
    gains = analysis.length_gains
    return (state.candidate_recalled and verdict is AnalysisPhase.INCONCLUSIVE and analysis.failed == 0
            and bool(gains) and sum(gains) > 0)


def _measurement(canary: PodGroupMetrics, control: PodGroupMetrics, inputs: LifecycleInput,
                 params: LifecycleParams, analysis: CanaryAnalysis, *, alone: bool) -> MeasurementResult:
    """Against the served draft, on the analysis' measured noise; a first draft (nothing served but the
    bootstrap head at K=0), or a canary speculating while the fleet does not (``alone``: no live
    acceptance of the served draft to beat), on its own against control pods that do not speculate."""
    if inputs.first_draft or alone:
        return measure_first_draft(canary, control, inputs.batch_size, params.canary, params.first_draft)
    return measure(canary, control, params.canary, analysis)


def promoted(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    if state.recalled_expected is not None:
        return after_recall_promotion(state, params, now)
    # TIDE keeps collecting after a deploy: gains continue until a new draft stops beating the old.
    return to_phase(
        state,
        Phase.COLLECTING,
        now,
        "Collecting",
        "promoted; collecting for the next round",
        capture=params.capture.enabled,
    )


def rolled_back(state: LifecycleState, inputs: LifecycleInput, params: LifecycleParams, now: float) -> Step:
    if state.recall_only:  # a draft recalled on a rise of acceptance: the served draft does better than before
        if not inputs.shift:
            return back_to_serving(state, now, "Serving", "the recalled draft rolled back; acceptance rose, serving on")
        state = replace(state, recall_only=False)  # acceptance fell since: collect and train as for any shift
    if state.rollbacks < MAX_CONSECUTIVE_ROLLBACKS and params.capture.enabled:
        return to_phase(
            state,
            Phase.COLLECTING,
            now,
            "Collecting",
            "rolled back; collecting for another candidate",
            capture=True,
        )
    return to_phase(
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
        return stay(state, reason, message, capture=state.capture_enabled)
    return roll_back(state, now, reason, message)


def roll_back(state: LifecycleState, now: float, reason: str, message: str) -> Step:
    candidate = state.candidate or ""
    back = replace(state, candidate=None, candidate_acceptance_length=None, candidate_recalled=False,
                   candidate_baseline=None, canary=None, canary_pods=(),
                   canary_alone=False, canary_bands=None, rollbacks=state.rollbacks + 1, last_canary_reason=reason,
                   last_canary_message=f"{candidate} rolled back: {message}")
    step = to_phase(back, Phase.ROLLED_BACK, now, reason, message, capture=state.capture_enabled)
    return with_action(step, act.RollBack(candidate, reason, message, state.canary_pods))
