"""The lifecycle under the fleet's training verdict (issue 17): a held run waits, a running one is
preempted and relaunched without a new threshold, the pool's evaluation never waits, and the time to
the next Job that the fleet drains lent replicas ahead of."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.control.lifecycle_cases import PARAMS, inputs, state
from tide_operator.control import actions as act
from tide_operator.control.lifecycle import Phase, RecallParams, TrainingObservation, TrainingStatus, step_lifecycle
from tide_operator.control.lifecycle_training import seconds_to_job
from tide_operator.control.restart import lifecycle_from_dict, lifecycle_to_dict

HELD = "training would not pay at this load"
RECALL = replace(PARAMS, recall=RecallParams(sample_threshold=20))


def test_a_held_run_waits_with_the_fleets_reason_and_keeps_capturing() -> None:
    step = step_lifecycle(state(Phase.COLLECTING), inputs(buffer_samples=150, training_deferred=HELD), PARAMS, 10.0)
    assert step.state.phase is Phase.COLLECTING
    assert step.reason == "TrainingDeferred"
    assert HELD in step.message
    assert "150 >= 100" in step.message
    assert not any(isinstance(a, act.LaunchTraining) for a in step.actions)
    assert step.state.capture_enabled


def test_below_the_threshold_a_held_run_reports_collecting() -> None:
    step = step_lifecycle(state(Phase.COLLECTING), inputs(buffer_samples=50, training_deferred=HELD), PARAMS, 10.0)
    assert step.reason == "Collecting"


def test_the_pools_evaluation_is_never_held() -> None:
    collecting = state(Phase.COLLECTING, shift_at=5.0)
    step = step_lifecycle(collecting, inputs(buffer_samples=20, pool=("v1",), training_deferred=HELD), RECALL, 10.0)
    assert step.state.phase is Phase.RECALLING
    assert [type(a) for a in step.actions] == [act.LaunchRecall]


def _training() -> object:
    return state(Phase.TRAINING, active_run="r3", run_counter=3, last_run="r3", capture_enabled=False)


@pytest.mark.parametrize("seen", [None, TrainingObservation("r3", TrainingStatus.RUNNING)])
def test_a_running_run_is_preempted_and_its_samples_kept(seen) -> None:
    step = step_lifecycle(_training(), inputs(training=seen, training_deferred=HELD), PARAMS, 50.0)
    assert (step.state.phase, step.reason) == (Phase.COLLECTING, "TrainingPreempted")
    cancels = [a for a in step.actions if isinstance(a, act.CancelTraining)]
    assert [c.run_id for c in cancels] == ["r3"]
    assert step.state.active_run is None
    assert step.state.training_preempted
    assert step.state.capture_enabled
    # Once training pays again the next run launches at once, with no new threshold of samples.
    resumed = step_lifecycle(step.state, inputs(buffer_samples=0), PARAMS, 80.0)
    launch = [a for a in resumed.actions if isinstance(a, act.LaunchTraining)]
    assert [a.run_id for a in launch] == ["r4"]
    assert not resumed.state.training_preempted
    # The flag survives an operator restart (status).
    assert lifecycle_from_dict(lifecycle_to_dict(step.state)).training_preempted


def test_a_run_that_finished_is_not_preempted() -> None:
    done = TrainingObservation("r3", TrainingStatus.SUCCEEDED, 2.6, 2.0)
    step = step_lifecycle(_training(), inputs(training=done, training_deferred=HELD), PARAMS, 50.0)
    assert step.state.phase is Phase.EVALUATING


@pytest.mark.parametrize(("lifecycle", "samples", "pool", "deferred", "want"), [
    (state(Phase.COLLECTING), 20, (), False, (100 - 20) / 4),  # the training threshold at 4 samples/s
    (state(Phase.COLLECTING), 150, (), False, 0.0),  # due now
    (state(Phase.COLLECTING, shift_at=5.0), 8, ("v1",), False, (20 - 8) / 4),  # the pool's evaluation first
    (state(Phase.COLLECTING, shift_at=5.0, recalled_for_shift=5.0), 8, ("v1",), False, (100 - 8) / 4),
    (state(Phase.COLLECTING, training_preempted=True), 0, (), False, 0.0),
    (state(Phase.COLLECTING), 20, (), True, None),  # held: no training run foreseen
    (state(Phase.COLLECTING, shift_at=5.0), 8, ("v1",), True, (20 - 8) / 4),  # ... but the evaluation is
    (state(Phase.COLLECTING, retrain_at=400.0), 150, (), False, 300.0),  # a ShiftPersists wait
    (state(Phase.SERVING), 20, (), False, None),
    (state(Phase.CANARY), 20, (), False, None),
])
def test_seconds_to_the_next_job(lifecycle, samples, pool, deferred, want) -> None:
    assert seconds_to_job(lifecycle, RECALL, samples, pool, 100.0, 4.0, training_deferred=deferred) == want


def test_no_samples_arriving_foresees_no_job() -> None:
    assert seconds_to_job(state(Phase.COLLECTING), PARAMS, 20, (), 100.0, 0.0) is None


def test_a_shift_makes_a_preempted_runs_samples_stale() -> None:
    """The preempted run's samples were of the old traffic: after a shift the pool is tried and a full
    threshold of new samples is collected, as for any shift."""
    preempted = state(Phase.COLLECTING, training_preempted=True, shift_at=5.0, recalled_for_shift=5.0)
    shifted = step_lifecycle(preempted, inputs(buffer_samples=30, shift=True, shift_started=True, pool=("v1",)),
                             RECALL, 100.0)
    assert not shifted.state.training_preempted
    after = step_lifecycle(shifted.state, inputs(buffer_samples=40, shift=True, pool=("v1",)), RECALL, 130.0)
    assert not any(isinstance(a, act.LaunchTraining) for a in after.actions)
