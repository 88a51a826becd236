"""The draft pool's recall decision (issue 16): on a shift the pool is scored before any training run;
a pooled draft that beats the served one by the canary's margin goes to the canary as it is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.control.lifecycle_cases import PARAMS, inputs, state
from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryAnalysis, PodGroupMetrics
from tide_operator.control.lifecycle import (
    LifecycleParams,
    Phase,
    RecallObservation,
    RecallParams,
    TrainingStatus,
    step_lifecycle,
)
from tide_operator.control.restart import lifecycle_from_dict, lifecycle_to_dict

RECALL = replace(PARAMS, recall=RecallParams(sample_threshold=20, shortfall_percent=10.0))
SHIFT_AT = 1000.0


def _collecting(**kwargs: object):  # after a shift at SHIFT_AT, buffer counted from 0
    return state(Phase.COLLECTING, shift_at=SHIFT_AT, **kwargs)


def _recall_step(pool: tuple[str, ...] = ("v1", "initial"), samples: int = 20, params: LifecycleParams = RECALL):
    return step_lifecycle(_collecting(), inputs(buffer_samples=samples, pool=pool), params, 1100.0)


def test_a_shift_with_a_pool_scores_it_before_training() -> None:
    step = _recall_step()
    assert step.state.phase is Phase.RECALLING
    assert step.reason == "RecallEvaluating"
    (launch,) = step.actions
    assert isinstance(launch, act.LaunchRecall)
    assert (launch.versions, launch.captured_since, launch.run_id) == (("v1", "initial"), SHIFT_AT, "r1")
    assert step.state.capture_enabled  # the shift's samples keep coming: training needs them if none wins
    assert (step.state.recall_run, step.state.recalled_for_shift) == ("r1", SHIFT_AT)


@pytest.mark.parametrize(("pool", "samples", "params"), [
    ((), 20, RECALL),  # nothing to recall
    (("v1",), 19, RECALL),  # not enough of the new traffic yet
    (("v1",), 20, replace(RECALL, recall=RecallParams(enabled=False, sample_threshold=20))),  # recall off
])
def test_no_recall_without_a_pool_enough_samples_or_when_disabled(pool, samples, params) -> None:
    step = _recall_step(pool, samples, params)
    assert step.state.phase is Phase.COLLECTING
    assert not any(isinstance(a, act.LaunchRecall) for a in step.actions)


def test_no_recall_without_a_shift() -> None:
    """Collecting after a promotion, with no shift seen: the next round trains as before."""
    step = step_lifecycle(state(Phase.COLLECTING), inputs(buffer_samples=100, pool=("v1",)), RECALL, 1100.0)
    assert [type(a) for a in step.actions] == [act.SetCapture, act.LaunchTraining]


def test_a_shift_trained_for_is_not_recalled_for_after_the_promotion_the_next_shift_is() -> None:
    """The first shift had nothing to recall (only the served launch draft): it trained. Collecting after that
    promotion, the pool holds the launch draft, yet scoring it on the same shift's traffic cannot help (the
    promoted draft just beat it there): only the next shift tries the pool."""
    trained = step_lifecycle(_collecting(), inputs(buffer_samples=100, pool=()), RECALL, 1100.0)
    assert any(isinstance(a, act.LaunchTraining) for a in trained.actions)
    assert trained.state.recalled_for_shift == SHIFT_AT
    after = replace(trained.state, phase=Phase.COLLECTING, active_run=None)
    same_shift = step_lifecycle(after, inputs(buffer_samples=50, pool=("initial",)), RECALL, 2000.0)
    assert same_shift.state.phase is Phase.COLLECTING
    assert not any(isinstance(a, act.LaunchRecall) for a in same_shift.actions)
    shifted = step_lifecycle(same_shift.state, inputs(buffer_samples=50, shift=True, shift_started=True,
                                                      pool=("initial",)), RECALL, 2100.0)
    recalled = step_lifecycle(shifted.state, inputs(buffer_samples=70, shift=True, pool=("initial",)), RECALL,
                              2200.0)
    assert [type(a) for a in recalled.actions if isinstance(a, act.LaunchRecall)] == [act.LaunchRecall]
    assert recalled.state.recalled_for_shift == 2100.0


def _recalling():
    return state(Phase.RECALLING, shift_at=SHIFT_AT, recall_run="r1", recalled_for_shift=SHIFT_AT, run_counter=1,
                 last_run="r1")


def _outcome(best: float | None, served: float = 2.0, status: TrainingStatus = TrainingStatus.SUCCEEDED,
             version: str | None = "v1") -> RecallObservation:
    return RecallObservation("r1", status, version if best is not None else None, best, served)


def test_waiting_for_the_evaluation_keeps_capturing() -> None:
    other_run = RecallObservation("r0", TrainingStatus.SUCCEEDED, "v1", 3.0, 2.0)
    for seen in (None, RecallObservation("r1", TrainingStatus.RUNNING), other_run):
        step = step_lifecycle(_recalling(), inputs(recall=seen, pool=("v1",)), RECALL, 1200.0)
        assert (step.state.phase, step.reason, step.actions) == (Phase.RECALLING, "RecallEvaluating", ())


@pytest.mark.parametrize(("seen", "reason"), [
    (_outcome(2.03), "RecallNotBetter"),  # 1.5% better: below the canary's 2% margin
    (_outcome(None), "RecallNotBetter"),  # no pooled draft could be scored
    (_outcome(None, status=TrainingStatus.FAILED), "RecallFailed"),
    (_outcome(None, status=TrainingStatus.MISSING), "RecallFailed"),
])
def test_no_winner_goes_on_collecting_for_training_and_never_retries_the_pool(seen, reason) -> None:
    step = step_lifecycle(_recalling(), inputs(recall=seen, pool=("v1",), buffer_samples=30), RECALL, 1200.0)
    assert (step.state.phase, step.reason, step.state.recall_run) == (Phase.COLLECTING, reason, None)
    assert step.state.capture_enabled
    later = step_lifecycle(step.state, inputs(pool=("v1",), buffer_samples=100), RECALL, 1300.0)
    assert [type(a) for a in later.actions] == [act.SetCapture, act.LaunchTraining]  # training, not the pool again


def test_a_winner_is_recalled_canaried_and_promoted_under_its_own_version() -> None:
    step = step_lifecycle(_recalling(), inputs(recall=_outcome(2.9), pool=("v1",)), RECALL, 1200.0)
    assert (step.state.phase, step.reason, step.state.candidate) == (Phase.EVALUATING, "DraftRecalled", "v1")
    assert step.state.candidate_recalled
    assert not step.state.capture_enabled
    # The live served number is worse than the report's: the baseline is the report's (same samples).
    canary = step_lifecycle(step.state, inputs(ready_pods=("p0", "p1"), served_acceptance_length=1.2), RECALL,
                            1230.0)
    (start,) = canary.actions
    assert isinstance(start, act.StartCanary)
    assert (start.candidate, start.recalled, start.pods) == ("v1", True, ("p0",))
    judged, live = canary, inputs(canary=PodGroupMetrics(2.9, 100.0), control=PodGroupMetrics(2.0, 100.0))
    for t in range(1260, 1230 + 600, 30):  # measurements a minute apart, 30 s passes
        judged = step_lifecycle(judged.state, live, RECALL, float(t))
        if judged.state.phase is not Phase.CANARY:
            break
    (promote,) = judged.actions
    assert isinstance(promote, act.Promote)
    assert (promote.candidate, promote.recalled) == ("v1", True)
    assert "evaluation acceptance_length=2.900 vs served 2.000" in promote.message  # the history's evidence
    assert judged.state.recalled_expected == pytest.approx(2.9)
    serving = step_lifecycle(judged.state, inputs(), RECALL, 1330.0)
    assert (serving.state.phase, serving.reason) == (Phase.SERVING, "RecalledDraftServing")  # no training round


def test_a_recalled_draft_short_of_its_evaluation_for_two_windows_is_retrained() -> None:
    served = state(Phase.SERVING, capture_enabled=False, recalled_expected=3.0, shift_at=SHIFT_AT)
    window = RECALL.canary.analysis_window_s
    short = inputs(served_acceptance_length=2.6, buffer_samples=7)  # 13% below: more than 10%
    step = step_lifecycle(served, short, RECALL, 2000.0)
    assert (step.state.phase, step.state.recall_shortfall_since) == (Phase.SERVING, 2000.0)
    recovered = step_lifecycle(step.state, inputs(served_acceptance_length=2.8), RECALL, 2000.0 + window)
    assert recovered.state.recall_shortfall_since is None  # 7% below: within the threshold, the clock resets
    again = step_lifecycle(recovered.state, short, RECALL, 3000.0)
    held = step_lifecycle(again.state, short, RECALL, 3000.0 + 2 * window - 1)
    assert held.state.phase is Phase.SERVING
    retrain = step_lifecycle(held.state, short, RECALL, 3000.0 + 2 * window)
    assert (retrain.state.phase, retrain.reason) == (Phase.COLLECTING, "RecalledDraftShort")
    assert (retrain.state.recalled_expected, retrain.state.buffer_baseline) == (None, 7)
    assert [type(a) for a in retrain.actions] == [act.SetCapture]


def test_a_shift_while_recalling_cancels_the_evaluation() -> None:
    step = step_lifecycle(_recalling(), inputs(shift=True, shift_started=True, buffer_samples=50), RECALL, 1500.0)
    cancel = [a for a in step.actions if isinstance(a, act.CancelTraining)]
    assert [a.run_id for a in cancel] == ["r1"]
    assert (step.state.phase, step.state.recall_run, step.state.shift_at) == (Phase.COLLECTING, None, 1500.0)
    retry = step_lifecycle(step.state, inputs(buffer_samples=70, pool=("v1",)), RECALL, 1530.0)
    assert any(isinstance(a, act.LaunchRecall) for a in retry.actions)  # a new shift: the pool is tried again


def test_a_pin_while_recalling_cancels_the_evaluation() -> None:
    step = step_lifecycle(_recalling(), inputs(draft_pin="v1"), RECALL, 1500.0)
    assert [a.run_id for a in step.actions if isinstance(a, act.CancelTraining)] == ["r1"]
    assert (step.state.phase, step.state.recall_run) == (Phase.SERVING, None)


def test_a_failed_recalled_canary_rolls_back_and_collects() -> None:
    canary = state(Phase.CANARY, candidate="v1", candidate_acceptance_length=2.9, candidate_recalled=True,
                   candidate_baseline=2.0, canary=CanaryAnalysis(started_at=0.0), canary_pods=("p0",),
                   capture_enabled=False)
    step = step_lifecycle(canary, inputs(abort_canary=True), RECALL, 100.0)
    (rollback,) = step.actions
    assert isinstance(rollback, act.RollBack)
    assert rollback.pods == ("p0",)
    assert (step.state.candidate_recalled, step.state.candidate_baseline) == (False, None)


def test_the_recall_state_survives_a_restart() -> None:
    recalled = replace(_recalling(), candidate_recalled=True, candidate_baseline=2.0, recalled_expected=2.9,
                       recall_shortfall_since=5.0)
    assert lifecycle_from_dict(lifecycle_to_dict(recalled)) == recalled


# A return to a domain the served draft knows better raises acceptance: the pool is tried, nothing trained.
ROSE = inputs(rise_started=True, pool=("initial",), buffer_samples=40)


def _rose():
    served = state(Phase.SERVING, capture_enabled=False, shift_at=SHIFT_AT, recalled_for_shift=SHIFT_AT)
    return step_lifecycle(served, ROSE, RECALL, 2000.0)


def test_a_rise_of_acceptance_collects_for_the_pool_and_never_trains() -> None:
    step = _rose()
    assert (step.state.phase, step.reason, step.state.recall_only) == (Phase.COLLECTING, "AcceptanceRose", True)
    assert (step.state.shift_at, step.state.buffer_baseline) == (2000.0, 40)
    assert [type(a) for a in step.actions] == [act.SetCapture]
    waiting = step_lifecycle(step.state, inputs(pool=("initial",), buffer_samples=59), RECALL, 2030.0)
    assert (waiting.state.phase, waiting.reason, waiting.actions) == (Phase.COLLECTING, "CollectingForRecall", ())
    due = step_lifecycle(waiting.state, inputs(pool=("initial",), buffer_samples=60), RECALL, 2060.0)
    (launch,) = due.actions
    assert isinstance(launch, act.LaunchRecall)
    assert (launch.versions, launch.captured_since) == (("initial",), 2000.0)
    # Thousands of samples later (the evaluation slow), still no training Job.
    slow = step_lifecycle(due.state, inputs(pool=("initial",), buffer_samples=9000), RECALL, 2400.0)
    assert slow.state.phase is Phase.RECALLING
    assert not any(isinstance(a, act.LaunchTraining) for a in slow.actions)


@pytest.mark.parametrize("served", [None, replace(PARAMS.capture, enabled=False)])
def test_a_rise_without_a_pool_or_capture_keeps_serving(served) -> None:
    params = RECALL if served is None else replace(RECALL, capture=served)
    pool = () if served is None else ("initial",)
    step = step_lifecycle(state(Phase.SERVING), inputs(rise_started=True, pool=pool), params, 2000.0)
    assert (step.state.phase, step.reason, step.state.recall_only) == (Phase.SERVING, "Serving", False)


@pytest.mark.parametrize(("seen", "reason"), [
    (_outcome(2.03), "RecallNotBetter"),
    (_outcome(None, status=TrainingStatus.FAILED), "RecallFailed"),
])
def test_a_rise_whose_pool_does_not_win_goes_back_to_serving(seen, reason) -> None:
    recalling = replace(_recalling(), recall_only=True, capture_enabled=True)
    step = step_lifecycle(recalling, inputs(recall=seen, pool=("v1",), buffer_samples=500), RECALL, 1200.0)
    assert (step.state.phase, step.reason, step.state.recall_only) == (Phase.SERVING, reason, False)
    assert [type(a) for a in step.actions] == [act.SetCapture]  # capture off: nothing to train for
    later = step_lifecycle(step.state, inputs(pool=("v1",), buffer_samples=5000), RECALL, 1300.0)
    assert later.state.phase is Phase.SERVING


def test_a_rise_whose_pool_wins_is_canaried_and_serves_without_training() -> None:
    recalling = replace(_recalling(), recall_only=True, capture_enabled=True)
    step = step_lifecycle(recalling, inputs(recall=_outcome(2.9), pool=("v1",)), RECALL, 1200.0)
    assert (step.state.phase, step.state.candidate, step.state.recall_only) == (Phase.EVALUATING, "v1", True)
    promoted = replace(step.state, phase=Phase.PROMOTED, candidate=None, recalled_expected=2.9)
    serving = step_lifecycle(promoted, inputs(), RECALL, 1800.0)
    assert (serving.state.phase, serving.reason, serving.state.recall_only) == (
        Phase.SERVING, "RecalledDraftServing", False)


def test_a_rise_whose_recalled_canary_rolls_back_serves_on_unless_acceptance_fell_since() -> None:
    canary = state(Phase.CANARY, candidate="v1", candidate_acceptance_length=2.9, candidate_recalled=True,
                   candidate_baseline=2.0, canary=CanaryAnalysis(started_at=0.0), canary_pods=("p0",),
                   capture_enabled=False, recall_only=True)
    back = step_lifecycle(canary, inputs(abort_canary=True), RECALL, 100.0)
    assert back.state.phase is Phase.ROLLED_BACK
    serving = step_lifecycle(back.state, inputs(), RECALL, 130.0)
    assert (serving.state.phase, serving.state.recall_only) == (Phase.SERVING, False)
    fell = step_lifecycle(back.state, inputs(shift=True), RECALL, 130.0)
    assert (fell.state.phase, fell.state.recall_only) == (Phase.COLLECTING, False)


def test_a_fall_while_collecting_after_a_rise_trains_as_for_any_shift() -> None:
    step = step_lifecycle(_rose().state, inputs(shift=True, shift_started=True, buffer_samples=50), RECALL, 2100.0)
    assert (step.state.phase, step.state.recall_only, step.state.shift_at) == (Phase.COLLECTING, False, 2100.0)
    train = step_lifecycle(step.state, inputs(shift=True, buffer_samples=50 + 2048, pool=()), RECALL, 2200.0)
    assert any(isinstance(a, act.LaunchTraining) for a in train.actions)


def test_a_rise_survives_a_restart() -> None:
    rose = _rose().state
    assert lifecycle_from_dict(lifecycle_to_dict(rose)) == rose


@pytest.mark.parametrize("phase", [Phase.COLLECTING, Phase.TRAINING])
def test_a_rise_while_collecting_or_training_makes_the_samples_stale_and_tries_the_pool_first(phase) -> None:
    """Traffic returned home while the loop was collecting (or training) on the excursion's samples."""
    busy = state(phase, shift_at=SHIFT_AT, recalled_for_shift=SHIFT_AT, active_run="r3" if phase is Phase.TRAINING
                 else None, run_counter=3)
    step = step_lifecycle(busy, inputs(rise_started=True, pool=("initial",), buffer_samples=500), RECALL, 2000.0)
    assert (step.state.phase, step.reason, step.state.shift_at) == (Phase.COLLECTING, "AcceptanceRose", 2000.0)
    assert step.state.recall_only is False  # the round was going to train anyway: it does, if the pool loses
    assert [a.run_id for a in step.actions if isinstance(a, act.CancelTraining)] == (
        ["r3"] if phase is Phase.TRAINING else [])
    due = step_lifecycle(step.state, inputs(pool=("initial",), buffer_samples=520), RECALL, 2030.0)
    assert any(isinstance(a, act.LaunchRecall) for a in due.actions)


def test_a_rise_while_training_with_no_pooled_draft_to_try_lets_the_run_finish() -> None:
    """The served draft does better than before and nothing could replace it: a rise on noise alone must
    not cancel a good round."""
    busy = state(Phase.TRAINING, shift_at=SHIFT_AT, active_run="r1", run_counter=1)
    step = step_lifecycle(busy, inputs(rise_started=True, pool=(), buffer_samples=500), RECALL, 2000.0)
    assert step.state.phase is Phase.TRAINING
    assert step.state.shift_at == SHIFT_AT
    assert not any(isinstance(a, act.CancelTraining) for a in step.actions)


# ---- the buffer's count after a cancelled Job ------------------------------------------------------------------
def test_a_cancelled_runs_samples_are_not_counted_as_the_shifts() -> None:
    """The buffer counts from the latest training Job's launch; once a shift cancelled that Job, the count
    starts from an older launch and holds every sample since. The baseline is taken again there: a whole-loop
    run scored the pool on "693 samples since the shift" one pass after the shift cancelled a run."""
    recall = replace(PARAMS, recall=RecallParams(sample_threshold=64))
    training = state(Phase.TRAINING, active_run="r2", run_counter=2, last_run="r2", buffer_since=1500.0)
    shifted = step_lifecycle(training, inputs(shift=True, shift_started=True, buffer_samples=10, buffer_since=1500.0,
                                              pool=("initial",)), recall, 2000.0)
    assert (shifted.state.phase, shifted.state.buffer_baseline) == (Phase.COLLECTING, 10)
    # r2's Job is gone: the count starts at r1's launch and holds the 693 samples since.
    later = step_lifecycle(shifted.state, inputs(shift=True, buffer_samples=693, buffer_since=1000.0,
                                                 pool=("initial",)), recall, 2005.0)
    assert not any(isinstance(a, act.LaunchRecall) for a in later.actions)
    assert (later.state.buffer_baseline, later.state.buffer_since) == (693, 1000.0)
    scored = step_lifecycle(later.state, inputs(shift=True, buffer_samples=693 + 64, buffer_since=1000.0,
                                                pool=("initial",)), recall, 2020.0)
    (launch,) = [a for a in scored.actions if isinstance(a, act.LaunchRecall)]
    assert "64 samples since the shift" in launch.message


def test_a_new_launch_keeps_its_own_baseline() -> None:
    """A launch counts from its own Job (the baseline is 0 then): the count's start moving forward is no reason
    to take it again."""
    collecting = state(Phase.COLLECTING, buffer_baseline=0, buffer_since=3000.0, shift_at=2900.0)
    step = step_lifecycle(collecting, inputs(buffer_samples=5, buffer_since=3000.0), PARAMS, 3010.0)
    assert step.state.buffer_baseline == 0
    moved = step_lifecycle(replace(collecting, buffer_since=2000.0), inputs(buffer_samples=5, buffer_since=3000.0),
                           PARAMS, 3010.0)
    assert (moved.state.buffer_baseline, moved.state.buffer_since) == (0, 3000.0)


# ---- a recalled draft's inconclusive canary ------------------------------------------------------------------
def _recalled_canary_ended(gains: tuple[float, ...], recalled: bool = True):
    """Five measurements taken (the default window's), none successful or failed, the last one just now."""
    analysis = CanaryAnalysis(started_at=0.0, inconclusive=5, measured_at=299.0, length_gains=gains,
                              canary_length_sum=5 * 3.6, with_length=5)
    return state(Phase.CANARY, candidate="v1", candidate_acceptance_length=3.635, candidate_recalled=recalled,
                 candidate_baseline=3.428 if recalled else None, canary=analysis, canary_pods=("p0",),
                 capture_enabled=False, last_promotion_at=None)


def test_an_inconclusive_canary_promotes_a_recalled_draft_whose_live_gain_is_positive() -> None:
    """The pool's evaluation compared v1 and v2 on the same requests (3.635 vs 3.428); the canary compares two
    pods on different ones, and on two CPU pods its noise hid that gain. It saw no loss: v1 is promoted and
    watched against its evaluation."""
    step = step_lifecycle(_recalled_canary_ended((0.04, -0.01, 0.05, 0.02, 0.03)), inputs(), RECALL, 300.0)
    (promote,) = [a for a in step.actions if isinstance(a, act.Promote)]
    assert (promote.candidate, promote.recalled) == ("v1", True)
    assert (step.state.phase, step.reason) == (Phase.PROMOTED, "CanarySuccessful")
    assert "live mean gain was +2.6%" in step.message
    assert step.state.recalled_expected == 3.635


@pytest.mark.parametrize(("gains", "recalled"), [
    ((0.01, -0.03, -0.02, 0.01, -0.01), True),  # a recalled draft that did worse live, on the mean
    ((), True),  # no live measurement had data
    ((0.04, -0.01, 0.05, 0.02, 0.03), False),  # a trained candidate: the canary must show its gain
])
def test_an_inconclusive_canary_rolls_back_otherwise(gains: tuple[float, ...], recalled: bool) -> None:
    step = step_lifecycle(_recalled_canary_ended(gains, recalled), inputs(), RECALL, 300.0)
    assert (step.state.phase, step.reason) == (Phase.ROLLED_BACK, "CanaryInconclusive")
