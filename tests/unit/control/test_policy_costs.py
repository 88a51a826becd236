"""Costs the policy paid where they bought nothing (issue 15, the train seeds' remaining phase misses).

(a) Capture stayed on while a run trained and its candidate was judged (Training, Evaluating, Canary,
    Promoted): samples that only a next round could use, and whether one follows is the verdict's to
    say (a "not better" stops collection). Capture costs serving throughput (the bench charges 2%):
    in bursty-11 it ran for the whole of both high-load phases, where the table drafts nothing, and
    they fell to 0.975 of no speculation. Now capture runs while Collecting, and the next round
    collects its own sampleThreshold after the verdict.
"""

from __future__ import annotations

from tests.unit.control import lifecycle_cases as cases
from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryParams, PodGroupMetrics
from tide_operator.control.lifecycle import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    TrainingObservation,
    TrainingParams,
    TrainingStatus,
    step_lifecycle,
)

PARAMS = LifecycleParams(
    training=TrainingParams(sample_threshold=100),
    canary=CanaryParams(analysis_window_s=300, measurement_interval_s=60, min_promotion_interval_s=0,
                        consecutive_success_limit=2),
)
REV = cases.REV


def inputs(**kwargs: object) -> LifecycleInput:
    return cases.inputs(**({"ready_pods": ("pod-0", "pod-1")} | kwargs))


def captures(actions: tuple[act.Action, ...]) -> list[bool]:
    return [a.enabled for a in actions if isinstance(a, act.SetCapture)]


def test_capture_runs_while_collecting_and_pauses_while_a_run_is_trained_and_judged() -> None:
    collecting = LifecycleState(phase=Phase.COLLECTING, phase_since=0.0, target_revision=REV, capture_enabled=True)
    launched = step_lifecycle(collecting, inputs(buffer_samples=100), PARAMS, now=30.0)
    assert launched.state.phase is Phase.TRAINING
    assert captures(launched.actions) == [False]  # the run has its samples
    running = step_lifecycle(launched.state, inputs(training=TrainingObservation("r1", TrainingStatus.RUNNING),
                                                    buffer_samples=0), PARAMS, now=60.0)
    assert not running.state.capture_enabled
    done = TrainingObservation("r1", TrainingStatus.SUCCEEDED, 2.4, 2.0)
    evaluating = step_lifecycle(running.state, inputs(training=done), PARAMS, now=90.0)
    canary = step_lifecycle(evaluating.state, inputs(training=done), PARAMS, now=120.0)
    assert canary.state.phase is Phase.CANARY
    assert not canary.state.capture_enabled
    state, now = canary.state, 120.0
    better, control = PodGroupMetrics(2.4, 100.0), PodGroupMetrics(2.0, 100.0)
    while state.phase is Phase.CANARY:
        now += 60.0
        step = step_lifecycle(state, inputs(canary=better, control=control), PARAMS, now=now)
        assert captures(step.actions) == []  # still off, never switched on for the canary
        state = step.state
    assert state.phase is Phase.PROMOTED
    again = step_lifecycle(state, inputs(), PARAMS, now=now + 30.0)
    assert again.state.phase is Phase.COLLECTING
    assert captures(again.actions) == [True]  # the next round collects its own samples


def test_a_run_that_is_not_better_leaves_capture_off_without_a_shift() -> None:
    training = LifecycleState(phase=Phase.TRAINING, phase_since=0.0, target_revision=REV, active_run="r1",
                              run_counter=1, capture_enabled=False)
    verdict = TrainingObservation("r1", TrainingStatus.NOT_BETTER, 1.9, 2.0)
    step = step_lifecycle(training, inputs(training=verdict), PARAMS, now=600.0)
    assert step.state.phase is Phase.SERVING
    assert captures(step.actions) == []
    assert not step.state.capture_enabled


def test_a_shift_during_a_run_collects_again_at_once() -> None:
    training = LifecycleState(phase=Phase.TRAINING, phase_since=0.0, target_revision=REV, active_run="r1",
                              run_counter=1, capture_enabled=False)
    step = step_lifecycle(training, inputs(shift=True, shift_started=True), PARAMS, now=600.0)
    assert step.state.phase is Phase.COLLECTING
    assert captures(step.actions) == [True]
