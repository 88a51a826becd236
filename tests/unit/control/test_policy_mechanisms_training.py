"""Issue 15, mechanism 5: training after a shift uses the shift's samples, and a lasting shift is retrained.

(a) Collection counted samples since the shift, but the trainer claimed the whole, mixed buffer (old and
    new domain): LaunchTraining now carries the time the shift began and the claim starts there.
(b) A "not better" verdict stopped capture while the drift detector's shift signal stayed raised, so the
    new domain was never trained again: while the signal holds, collection goes on and a new run starts
    once sampleThreshold samples arrived since the verdict, no sooner than minPromotionInterval after it
    (doubling with each verdict in a row). When the signal clears, capture stops as before.
"""

from __future__ import annotations

import json

from tests.unit.control.lifecycle_cases import PARAMS, inputs, state
from tide_operator.control import actions as act
from tide_operator.control.lifecycle import (
    Phase,
    TrainingObservation,
    TrainingStatus,
    step_lifecycle,
)
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide
from tide_operator.control.restart import lifecycle_from_dict, lifecycle_to_dict


def launches(step_actions: tuple[act.Action, ...]) -> list[act.LaunchTraining]:
    return [a for a in step_actions if isinstance(a, act.LaunchTraining)]


def not_better(run_id: str) -> TrainingObservation:
    return TrainingObservation(run_id, TrainingStatus.NOT_BETTER, candidate_acceptance_length=1.9,
                               served_acceptance_length=2.0)


# ---- (a) the run trains on what was captured since the shift ----------------------------------------


def test_a_run_after_a_shift_claims_the_captures_since_the_shift() -> None:
    shifted = step_lifecycle(state(Phase.SERVING, capture_enabled=False),
                             inputs(shift=True, shift_started=True, buffer_samples=5000), PARAMS, now=1000.0)
    assert shifted.state.phase is Phase.COLLECTING
    waiting = step_lifecycle(shifted.state, inputs(shift=True, buffer_samples=5099), PARAMS, now=1300.0)
    assert launches(waiting.actions) == []
    launched = step_lifecycle(waiting.state, inputs(shift=True, buffer_samples=5100), PARAMS, now=1330.0)
    (launch,) = launches(launched.actions)
    assert launch.captured_since == 1000.0  # not the whole buffer of 5100 samples, most from before the shift
    assert "since the shift" in launch.message


def test_a_shift_while_collecting_moves_the_claim_to_the_new_shift() -> None:
    first = step_lifecycle(state(Phase.COLLECTING, shift_at=100.0), inputs(shift=True, shift_started=True,
                                                                            buffer_samples=70), PARAMS, now=900.0)
    launched = step_lifecycle(first.state, inputs(shift=True, buffer_samples=170), PARAMS, now=930.0)
    assert [a.captured_since for a in launches(launched.actions)] == [900.0]


def test_without_a_shift_the_first_run_claims_the_buffer_as_before() -> None:
    launched = step_lifecycle(state(Phase.COLLECTING), inputs(buffer_samples=100), PARAMS, now=50.0)
    assert [a.captured_since for a in launches(launched.actions)] == [None]


def test_the_shift_time_survives_a_restart_and_a_target_change_forgets_it() -> None:
    shifted = step_lifecycle(state(Phase.SERVING, capture_enabled=False),
                             inputs(shift=True, shift_started=True), PARAMS, now=1000.0).state
    restored = lifecycle_from_dict(json.loads(json.dumps(lifecycle_to_dict(shifted))))
    assert restored == shifted
    assert restored.shift_at == 1000.0
    changed = step_lifecycle(restored, inputs(target_revision="rev-2"), PARAMS, now=1100.0)
    assert changed.state.shift_at is None


# ---- (b) a lasting shift is trained again after a "not better" verdict -------------------------------


def test_a_not_better_verdict_while_the_shift_persists_keeps_collecting_and_trains_again() -> None:
    training = state(Phase.TRAINING, active_run="r1", run_counter=1, shift_at=500.0)
    verdict = step_lifecycle(training, inputs(shift=True, training=not_better("r1"), buffer_samples=400), PARAMS,
                             now=1000.0)
    assert (verdict.state.phase, verdict.reason) == (Phase.COLLECTING, "ShiftPersists")
    assert verdict.actions == ()  # capture stays on
    assert verdict.state.capture_enabled
    # Samples from before the verdict do not count: the threshold is on new ones.
    few = step_lifecycle(verdict.state, inputs(shift=True, buffer_samples=499), PARAMS, now=2000.0)
    assert (launches(few.actions), few.reason) == ([], "ShiftPersists")
    # Enough new samples, but minPromotionInterval (1800 s) since the verdict has not passed.
    early = step_lifecycle(few.state, inputs(shift=True, buffer_samples=600), PARAMS, now=2700.0)
    assert (launches(early.actions), early.reason) == ([], "ShiftPersists")
    again = step_lifecycle(early.state, inputs(shift=True, buffer_samples=600), PARAMS, now=2800.0)
    (launch,) = launches(again.actions)
    assert (again.state.phase, again.reason, launch.run_id) == (Phase.TRAINING, "ShiftPersists", "r2")
    assert launch.captured_since == 500.0  # the whole shift's samples, not just those since the verdict


def test_a_not_better_verdict_after_the_shift_cleared_stops_collection_as_before() -> None:
    training = state(Phase.TRAINING, active_run="r1", run_counter=1, shift_at=500.0)
    verdict = step_lifecycle(training, inputs(shift=False, training=not_better("r1")), PARAMS, now=1000.0)
    assert (verdict.state.phase, verdict.reason) == (Phase.SERVING, "CandidateNotBetter")
    assert verdict.actions == (act.SetCapture(False, "CandidateNotBetter", verdict.message),)


def test_capture_stops_when_the_shift_clears_before_the_retraining() -> None:
    training = state(Phase.TRAINING, active_run="r1", run_counter=1, shift_at=500.0)
    verdict = step_lifecycle(training, inputs(shift=True, training=not_better("r1")), PARAMS, now=1000.0)
    cleared = step_lifecycle(verdict.state, inputs(shift=False, buffer_samples=10_000), PARAMS, now=3000.0)
    assert (cleared.state.phase, cleared.reason) == (Phase.SERVING, "ShiftCleared")
    assert cleared.actions == (act.SetCapture(False, "ShiftCleared", cleared.message),)
    # And it stays so until the next shift, however full the buffer.
    held = step_lifecycle(cleared.state, inputs(shift=False, buffer_samples=20_000), PARAMS, now=5000.0)
    assert (held.state.phase, held.actions) == (Phase.SERVING, ())


def test_an_evaluation_that_is_not_better_while_the_shift_persists_keeps_collecting() -> None:
    evaluating = state(Phase.EVALUATING, candidate="r1", candidate_acceptance_length=1.9, run_counter=1)
    step = step_lifecycle(evaluating, inputs(shift=True, training=TrainingObservation(
        "r1", TrainingStatus.SUCCEEDED, 1.9, 2.0)), PARAMS, now=10.0)
    assert (step.state.phase, step.reason, step.state.candidate, step.actions) == (
        Phase.COLLECTING, "ShiftPersists", None, ())


def test_verdicts_in_a_row_double_the_wait_so_a_lasting_shift_never_retrains_in_a_tight_loop() -> None:
    """Even a shift signal that never clears (a frozen detector) retrains ever more rarely."""
    lifecycle, now, launched_at = state(Phase.TRAINING, active_run="r1", run_counter=1, shift_at=0.0), 0.0, []
    for i in range(600):  # 30 s passes, 1000 new samples each, every run not better: only the wait bounds them
        now += 30.0
        run = lifecycle.active_run
        seen = not_better(run) if run is not None else None
        step = step_lifecycle(lifecycle, inputs(shift=True, training=seen, buffer_samples=1000 * i), PARAMS, now)
        launched_at += [now for _ in launches(step.actions)]
        lifecycle = step.state
    # Verdicts at 30 s, 1860 s and 5490 s; waits of 1800 s (minPromotionInterval), 3600 s, 7200 s; the
    # fourth run would wait 14400 s, past the end.
    assert launched_at == [1830.0, 5460.0, 12690.0]
    assert (lifecycle.not_better_runs, lifecycle.retrain_at) == (4, 12720.0 + 14400.0)


def test_a_run_that_is_better_breaks_the_row() -> None:
    training = state(Phase.TRAINING, active_run="r2", run_counter=2, shift_at=0.0, not_better_runs=2)
    better = step_lifecycle(training, inputs(shift=True, training=TrainingObservation(
        "r2", TrainingStatus.SUCCEEDED, 2.4, 2.0)), PARAMS, now=10.0)
    assert (better.state.phase, better.state.not_better_runs) == (Phase.EVALUATING, 0)


def test_a_new_shift_starts_the_wait_over() -> None:
    training = state(Phase.TRAINING, active_run="r1", run_counter=1, shift_at=0.0, not_better_runs=3)
    verdict = step_lifecycle(training, inputs(shift=True, training=not_better("r1")), PARAMS, now=10.0)
    shifted = step_lifecycle(verdict.state, inputs(shift=True, shift_started=True, buffer_samples=5),
                             PARAMS, now=20.0)
    assert (shifted.state.not_better_runs, shifted.state.retrain_at, shifted.state.shift_at) == (0, None, 20.0)
    launched = step_lifecycle(shifted.state, inputs(shift=True, buffer_samples=105), PARAMS, now=50.0)
    assert [(a.run_id, a.captured_since) for a in launches(launched.actions)] == [("r2", 20.0)]


# ---- the mechanism end to end through decide() --------------------------------------------------------


def observe(a: float, buffer_samples: int, training: TrainingObservation | None = None) -> Observation:
    return Observation(per_position_acceptance=(a,), batch_size=16, acceptance_samples=5000,
                       promoted_version="v1", buffer_samples=buffer_samples, training=training)


def test_decide_retrains_a_new_domain_after_a_not_better_run_while_acceptance_stays_low() -> None:
    params = PolicyParams(target_revision="rev-1")  # product defaults: sampleThreshold 2048, 10m interval
    state, log, now = PolicyState(), [], 0.0

    def run(observation: Observation) -> None:
        nonlocal state, now
        actions, state = decide(observation, state, params, now)
        log.extend((now, a) for a in actions)
        now += 30.0

    for _ in range(60):
        run(observe(0.72, 0))
    shift_at = now
    for i in range(60):  # the new domain: acceptance falls, capture counts 100 samples a pass
        run(observe(0.30, 100 * i))
    first = [a for _, a in log if isinstance(a, act.LaunchTraining)]
    assert len(first) == 1
    assert first[0].captured_since is not None
    assert first[0].captured_since >= shift_at
    run_id = state.lifecycle.active_run
    assert run_id is not None
    for i in range(60):  # the run is not better; the traffic stays new; samples keep coming
        run(observe(0.30, 100 * i, training=not_better(run_id)))
    assert state.shift_active
    # Capture paused only while each run trained (test_policy_costs.py), never at the verdict: it resumed.
    launched_at = {t for t, a in log if isinstance(a, act.LaunchTraining)}
    assert {t for t, a in log if isinstance(a, act.SetCapture) and not a.enabled} <= launched_at
    assert any(isinstance(a, act.SetCapture) and a.enabled and a.reason == "ShiftPersists" for _, a in log)
    relaunched = [a for _, a in log if isinstance(a, act.LaunchTraining)]
    assert len(relaunched) == 2
    assert relaunched[1].reason == "ShiftPersists"
