"""The draft lifecycle: every transition and guard, restart safety, and the canary analysis."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.unit.control.lifecycle_cases import PARAMS, REV, inputs, state
from tide_operator.control import actions as act
from tide_operator.control.canary import (
    AnalysisPhase,
    CanaryAnalysis,
    CanaryParams,
    MeasurementResult,
    PodGroupMetrics,
    analysis_phase,
    measure,
    record,
)
from tide_operator.control.lifecycle import (
    CaptureParams,
    LifecycleInput,
    LifecycleState,
    Phase,
    TrainingObservation,
    TrainingParams,
    TrainingStatus,
    refuse_candidate,
    step_lifecycle,
)
from tide_operator.control.restart import lifecycle_from_dict, lifecycle_to_dict, rebuild_lifecycle


def kinds(step_actions: tuple) -> list[str]:
    return [type(a).__name__ for a in step_actions]


def succeeded(run_id: str, candidate: float, served: float | None = 2.0) -> TrainingObservation:
    return TrainingObservation(run_id, TrainingStatus.SUCCEEDED, candidate, served)


@pytest.mark.parametrize(
    ("before", "given", "phase", "actions", "reason"),
    [
        # Serving: collection starts at a shift, not otherwise.
        (
            state(Phase.SERVING, capture_enabled=False),
            inputs(shift=True, shift_started=True),
            Phase.COLLECTING,
            ["SetCapture"],
            "WorkloadShift",
        ),
        (state(Phase.SERVING, capture_enabled=False), inputs(), Phase.SERVING, [], "Serving"),
        # Collecting: train at the sample threshold.
        (state(Phase.COLLECTING), inputs(buffer_samples=99), Phase.COLLECTING, [], "Collecting"),
        (  # the run has its samples: capture pauses until its verdict (test_policy_costs.py)
            state(Phase.COLLECTING),
            inputs(buffer_samples=100),
            Phase.TRAINING,
            ["SetCapture", "LaunchTraining"],
            "SampleThresholdReached",
        ),
        (
            state(Phase.COLLECTING, buffer_baseline=50),
            inputs(buffer_samples=120),
            Phase.COLLECTING,
            [],
            "Collecting",
        ),
        # Training: wait, then evaluate or count a failure.
        (state(Phase.TRAINING, active_run="r1", capture_enabled=False), inputs(), Phase.TRAINING, [],
         "TrainingRunning"),
        (
            state(Phase.TRAINING, active_run="r1", capture_enabled=False),
            inputs(training=TrainingObservation("r1", TrainingStatus.RUNNING)),
            Phase.TRAINING,
            [],
            "TrainingRunning",
        ),
        (
            state(Phase.TRAINING, active_run="r1", capture_enabled=False),
            inputs(training=succeeded("r1", 2.4)),
            Phase.EVALUATING,
            [],
            "TrainingSucceeded",
        ),
        (
            state(Phase.TRAINING, active_run="r1"),
            inputs(training=TrainingObservation("r1", TrainingStatus.FAILED)),
            Phase.COLLECTING,
            [],
            "TrainingFailed",
        ),
        (
            state(Phase.TRAINING, active_run="r1"),
            inputs(training=TrainingObservation("r1", TrainingStatus.MISSING)),
            Phase.COLLECTING,
            [],
            "TrainingFailed",
        ),
        (
            state(Phase.TRAINING, active_run="r1"),
            inputs(training=TrainingObservation("r1", TrainingStatus.SUCCEEDED)),
            Phase.COLLECTING,
            [],
            "TrainingFailed",
        ),  # succeeded without a report is not a candidate
        (
            state(Phase.TRAINING, active_run="r1", training_failures=2),
            inputs(training=TrainingObservation("r1", TrainingStatus.FAILED)),
            Phase.SERVING,
            ["SetCapture"],
            "TrainingGaveUp",
        ),
        # The trainer's own verdict (exit 7): TIDE Algorithm 1 stops collecting, nothing failed.
        (
            state(Phase.TRAINING, active_run="r1", training_failures=2, last_failure_at=9000.0),
            inputs(training=TrainingObservation("r1", TrainingStatus.NOT_BETTER, 1.9, 2.0)),
            Phase.SERVING,
            ["SetCapture"],
            "CandidateNotBetter",
        ),
        # Evaluating: TIDE's rule, then the promotion interval.
        (
            state(Phase.EVALUATING, candidate="r1", candidate_acceptance_length=2.4, capture_enabled=False),
            inputs(training=succeeded("r1", 2.4)),
            Phase.CANARY,
            ["StartCanary"],
            "CandidateBetter",
        ),
        (
            state(Phase.EVALUATING, candidate="r1", candidate_acceptance_length=1.9),
            inputs(training=succeeded("r1", 1.9)),
            Phase.SERVING,
            ["SetCapture"],
            "CandidateNotBetter",
        ),
        (
            state(Phase.EVALUATING, candidate="r1", candidate_acceptance_length=2.4),
            inputs(training=succeeded("r1", 2.4, served=2.5)),
            Phase.SERVING,
            ["SetCapture"],
            "CandidateNotBetter",
        ),
        (
            state(Phase.EVALUATING, candidate="r1", candidate_acceptance_length=2.4, last_promotion_at=9000.0,
                  capture_enabled=False),
            inputs(),
            Phase.EVALUATING,
            [],
            "PromotionIntervalNotElapsed",
        ),
        (
            state(
                Phase.EVALUATING,
                candidate="r1",
                candidate_acceptance_length=2.4,
                last_promotion_at=10000.0 - 1800,
                capture_enabled=False,
            ),
            inputs(),
            Phase.CANARY,
            ["StartCanary"],
            "CandidateBetter",
        ),
        # Promoted and rolled back are one-pass phases.
        (state(Phase.PROMOTED), inputs(), Phase.COLLECTING, [], "Collecting"),
        (state(Phase.ROLLED_BACK, rollbacks=1), inputs(), Phase.COLLECTING, [], "Collecting"),
        (state(Phase.ROLLED_BACK, rollbacks=2), inputs(), Phase.SERVING, ["SetCapture"], "Serving"),
    ],
)
def test_transitions(
    before: LifecycleState, given: LifecycleInput, phase: Phase, actions: list[str], reason: str
) -> None:
    step = step_lifecycle(before, given, PARAMS, now=10000.0)
    assert (step.state.phase, kinds(step.actions), step.reason) == (phase, actions, reason)


def test_launch_uses_the_next_deterministic_run_id_and_resets_the_baseline() -> None:
    step = step_lifecycle(
        state(Phase.COLLECTING, run_counter=4, buffer_baseline=10), inputs(buffer_samples=110), PARAMS, 0
    )
    assert step.actions == (act.SetCapture(False, step.reason, step.message),
                            act.LaunchTraining("r5", step.reason, step.message))
    assert (step.state.active_run, step.state.run_counter, step.state.buffer_baseline) == ("r5", 5, 0)


@pytest.mark.parametrize(
    ("failures", "elapsed", "launches"), [(1, 599, False), (1, 600, True), (2, 1199, False), (2, 1200, True)]
)
def test_backoff_doubles_after_each_failure(failures: int, elapsed: float, launches: bool) -> None:
    before = state(Phase.COLLECTING, training_failures=failures, last_failure_at=1000.0)
    step = step_lifecycle(before, inputs(buffer_samples=500), PARAMS, now=1000.0 + elapsed)
    assert (step.state.phase is Phase.TRAINING) == launches
    assert step.reason == ("SampleThresholdReached" if launches else "TrainingBackoff")


def test_a_not_better_run_stops_collection_without_counting_a_failure() -> None:
    training = state(Phase.TRAINING, active_run="r3", run_counter=3, training_failures=1, last_failure_at=50.0)
    seen = TrainingObservation("r3", TrainingStatus.NOT_BETTER, candidate_acceptance_length=1.9,
                               served_acceptance_length=2.1)
    step = step_lifecycle(training, inputs(training=seen, buffer_samples=500), PARAMS, now=100.0)
    assert step.actions == (act.SetCapture(False, "CandidateNotBetter", step.message),)
    assert (step.state.active_run, step.state.candidate, step.state.training_failures, step.state.last_failure_at) == (
        None, None, 0, None)
    assert "1.900" in step.message
    assert "2.100" in step.message
    # Collection stays off however full the buffer is, until the next shift; then no backoff.
    held = step_lifecycle(step.state, inputs(shift=True, buffer_samples=10_000), PARAMS, now=101.0)
    assert (held.state.phase, held.actions) == (Phase.SERVING, ())
    shifted = step_lifecycle(held.state, inputs(shift=True, shift_started=True, buffer_samples=10_000), PARAMS,
                             now=102.0)
    assert shifted.state.phase is Phase.COLLECTING
    launched = step_lifecycle(shifted.state, inputs(buffer_samples=10_100), PARAMS, now=103.0)
    # The run claims what was captured since that shift (issue 15, mechanism 5).
    assert launched.actions[-1:] == (
        act.LaunchTraining("r4", launched.reason, launched.message, captured_since=102.0),)


def test_a_shift_after_giving_up_resets_the_failure_count() -> None:
    gave_up = state(Phase.SERVING, capture_enabled=False, training_failures=3, last_failure_at=5.0)
    step = step_lifecycle(gave_up, inputs(shift=True, shift_started=True, buffer_samples=40), PARAMS, now=10.0)
    assert (step.state.phase, step.state.training_failures, step.state.buffer_baseline) == (
        Phase.COLLECTING,
        0,
        40,
    )


def test_only_one_training_runs_at_a_time() -> None:
    training = state(Phase.TRAINING, active_run="r1", run_counter=1)
    for t in range(10):
        step = step_lifecycle(training, inputs(buffer_samples=10_000, shift=True), PARAMS, now=float(t))
        assert not any(isinstance(a, act.LaunchTraining) for a in step.actions)
        training = step.state


@pytest.mark.parametrize("phase", [Phase.COLLECTING, Phase.TRAINING, Phase.EVALUATING])
def test_a_new_shift_makes_older_work_stale(phase: Phase) -> None:
    before = state(
        phase,
        active_run="r1" if phase is Phase.TRAINING else None,
        candidate="r1" if phase is Phase.EVALUATING else None,
        candidate_acceptance_length=2.4 if phase is Phase.EVALUATING else None,
    )
    step = step_lifecycle(before, inputs(shift=True, shift_started=True, buffer_samples=70), PARAMS, now=1.0)
    assert (step.state.phase, step.state.buffer_baseline, step.state.candidate) == (
        Phase.COLLECTING,
        70,
        None,
    )
    assert kinds(step.actions) == (["CancelTraining"] if phase is Phase.TRAINING else [])


def canary_state(**kwargs: object) -> LifecycleState:
    return state(
        Phase.CANARY,
        run_counter=1,
        candidate="r1",
        candidate_acceptance_length=2.4,
        canary=CanaryAnalysis(started_at=0.0),
        **kwargs,
    )


def run_canary(canary: float | None, control: float | None, minutes: int = 6, **kwargs: object) -> list:
    current, steps = canary_state(), []
    given = inputs(canary=PodGroupMetrics(canary, 100.0), control=PodGroupMetrics(control, 100.0), **kwargs)
    for t in range(30, minutes * 60 + 1, 30):
        step = step_lifecycle(current, given, PARAMS, now=float(t))
        steps.append(step)
        current = step.state
        if current.phase is not Phase.CANARY:
            break
    return steps


@pytest.mark.parametrize(
    ("canary", "control", "phase", "last_actions", "reason"),
    [
        (2.2, 2.0, Phase.PROMOTED, ["Promote"], "CanarySuccessful"),
        (1.9, 2.0, Phase.ROLLED_BACK, ["RollBack"], "CanaryFailed"),
        (2.02, 2.0, Phase.ROLLED_BACK, ["RollBack"], "CanaryInconclusive"),  # gain below 2%
        (None, 2.0, Phase.ROLLED_BACK, ["RollBack"], "CanaryInconclusive"),  # no data
    ],
)
def test_canary_outcomes(
    canary: float | None, control: float, phase: Phase, last_actions: list[str], reason: str
) -> None:
    steps = run_canary(canary, control)
    assert (steps[-1].state.phase, kinds(steps[-1].actions), steps[-1].reason) == (
        phase,
        last_actions,
        reason,
    )


def test_a_failed_measurement_rolls_back_at_once_and_three_successes_promote_early() -> None:
    # Measurements are due at 60 s, 120 s, ...; the first only seeds the noise estimate (Inconclusive).
    assert len(run_canary(1.9, 2.0)) == 4  # the second measurement fails: rolled back at once
    promoted = run_canary(2.2, 2.0)
    assert len(promoted) == 8  # three successful measurements a minute apart after the first, 30 s passes
    assert promoted[-1].state.last_promotion_at == 240.0
    assert promoted[-1].state.promoted_acceptance_length == pytest.approx(2.2)


def test_control_without_speculation_is_compared_with_the_served_length() -> None:
    steps = run_canary(2.2, None, served_acceptance_length=2.0)
    assert steps[-1].reason == "CanarySuccessful"
    steps = run_canary(2.2, None, served_acceptance_length=2.3)
    assert steps[-1].reason == "CanaryFailed"


def test_abort_canary_rolls_back_and_keeps_the_pointer() -> None:
    step = step_lifecycle(canary_state(), inputs(abort_canary=True), PARAMS, now=30.0)
    assert kinds(step.actions) == ["RollBack"]
    assert (step.state.phase, step.reason, step.state.candidate) == (Phase.ROLLED_BACK, "CanaryAborted", None)


@pytest.mark.parametrize("phase", [Phase.CANARY, Phase.TRAINING, Phase.COLLECTING])
def test_draft_pin_stops_canary_and_training(phase: Phase) -> None:
    before = canary_state(active_run=None) if phase is Phase.CANARY else state(phase, active_run="r2")
    step = step_lifecycle(before, inputs(draft_pin="v3"), PARAMS, now=30.0)
    expected = {
        Phase.CANARY: ["RollBack"],
        Phase.TRAINING: ["CancelTraining"],
        Phase.COLLECTING: ["CancelTraining"],
    }
    assert kinds(step.actions) == [*expected[phase], "SetCapture"]
    assert (step.state.phase, step.reason) == (Phase.SERVING, "DraftPinned")


def test_target_change_invalidates_drafts_and_retrains() -> None:
    before = state(Phase.TRAINING, active_run="r3", run_counter=3, last_promotion_at=5.0)
    step = step_lifecycle(before, inputs(target_revision="rev-2"), PARAMS, now=100.0)
    assert kinds(step.actions) == ["ServeDraft", "CancelTraining", "InvalidateArtifacts"]
    assert step.actions[0] == act.ServeDraft(None, "TargetChanged", step.message)
    assert (step.state.phase, step.state.target_revision, step.state.run_counter) == (
        Phase.COLLECTING,
        "rev-2",
        3,
    )
    assert step.state.active_run is None


def test_state_round_trips_through_json_status() -> None:
    steps = run_canary(2.2, 2.0, minutes=2)
    mid_canary = steps[-1].state
    assert mid_canary.phase is Phase.CANARY
    assert mid_canary.canary is not None
    restored = lifecycle_from_dict(json.loads(json.dumps(lifecycle_to_dict(mid_canary))))
    assert restored == mid_canary


def test_a_restart_mid_canary_resumes_without_repeating_work() -> None:
    before = run_canary(2.2, 2.0, minutes=2)[-1].state
    status = json.loads(json.dumps(lifecycle_to_dict(before)))
    resumed = rebuild_lifecycle(status, job_run_ids=["r1"], now=130.0)
    assert resumed == before
    # Past the window's time, three of its five measurements missing (the operator was down): the
    # same analysis goes on, and promotes without a second canary or run.
    seen: list[str] = []
    state = resumed
    for now in (300.0, 360.0, 420.0):
        step = step_lifecycle(state, inputs(canary=PodGroupMetrics(2.2, 1.0), control=PodGroupMetrics(2.0, 1.0)),
                              PARAMS, now=now)
        seen, state = seen + kinds(step.actions), step.state
    assert [k for k in seen if k != "SetCapture"] == ["Promote"]  # capture resumes for the next round
    assert state.canary is None


@pytest.mark.parametrize(
    ("status", "jobs", "phase", "active", "counter"),
    [
        (None, [], Phase.COLLECTING, None, 0),
        (None, ["r1", "r4"], Phase.TRAINING, "r4", 4),  # status lost: adopt the newest Job
        (
            {"phase": "Collecting", "run_counter": 2, "target_revision": REV},
            ["r1", "r3"],
            Phase.TRAINING,
            "r3",
            3,
        ),
        (
            {"phase": "Training", "run_counter": 3, "active_run": "r3", "target_revision": REV},
            ["r3"],
            Phase.TRAINING,
            "r3",
            3,
        ),
    ],
)
def test_rebuild_never_moves_the_run_counter_back(
    status: dict | None, jobs: list[str], phase: Phase, active: str | None, counter: int
) -> None:
    rebuilt = rebuild_lifecycle(status, jobs, now=50.0)
    assert (rebuilt.phase, rebuilt.active_run, rebuilt.run_counter) == (phase, active, counter)


def test_capture_disabled_in_the_spec_stops_collection() -> None:
    params = replace(PARAMS, capture=CaptureParams(enabled=False))
    step = step_lifecycle(state(Phase.COLLECTING), inputs(buffer_samples=1000), params, now=1.0)
    assert (step.state.phase, kinds(step.actions)) == (Phase.SERVING, ["SetCapture"])
    step = step_lifecycle(
        state(Phase.SERVING, capture_enabled=False), inputs(shift=True, shift_started=True), params, now=1.0
    )
    assert step.state.phase is Phase.SERVING


@pytest.mark.parametrize(
    ("canary", "control", "result"),
    [
        (PodGroupMetrics(2.1, 100.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.SUCCESSFUL),
        (PodGroupMetrics(2.03, 100.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.INCONCLUSIVE),
        # Within the band either side of the control: noise, not a verdict (a good candidate was failed by
        # one noisy measurement in the policy bench). More than 2% below control is worse: failed.
        (PodGroupMetrics(1.99, 100.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.INCONCLUSIVE),
        (PodGroupMetrics(1.95, 100.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.FAILED),
        (PodGroupMetrics(2.1, 94.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.FAILED),  # 6% slower
        (PodGroupMetrics(2.1, 96.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.SUCCESSFUL),
        (PodGroupMetrics(2.1, None), PodGroupMetrics(2.0, 100.0), MeasurementResult.SUCCESSFUL),
        (PodGroupMetrics(None, 100.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.INCONCLUSIVE),
        (PodGroupMetrics(float("nan"), 100.0), PodGroupMetrics(2.0, 100.0), MeasurementResult.INCONCLUSIVE),
    ],
)
def test_measurement_conditions(canary: PodGroupMetrics, control: PodGroupMetrics, result: MeasurementResult) -> None:
    # A second identical measurement: no spread, so the configured band and guard apply as they are.
    before = record(CanaryAnalysis(started_at=0.0), MeasurementResult.INCONCLUSIVE, canary, 60.0, control)
    assert measure(canary, control, CanaryParams(), before) is result


@pytest.mark.parametrize(
    ("results", "limit", "now", "phase"),
    [
        ([MeasurementResult.FAILED], 0, 60, AnalysisPhase.FAILED),
        ([MeasurementResult.FAILED], 1, 60, AnalysisPhase.RUNNING),
        ([MeasurementResult.SUCCESSFUL] * 3, 0, 299, AnalysisPhase.RUNNING),
        (  # the window's five measurements taken: the last one's verdict on all of them decides
            [MeasurementResult.INCONCLUSIVE] * 3 + [MeasurementResult.SUCCESSFUL] * 2,
            0,
            300,
            AnalysisPhase.SUCCESSFUL,
        ),
        (  # the last measurement judges the whole window: its evidence fell back inside the band
            [MeasurementResult.SUCCESSFUL] * 3 + [MeasurementResult.INCONCLUSIVE] * 2,
            0,
            300,
            AnalysisPhase.INCONCLUSIVE,
        ),
        (
            [MeasurementResult.SUCCESSFUL] * 2 + [MeasurementResult.INCONCLUSIVE] * 3,
            0,
            300,
            AnalysisPhase.INCONCLUSIVE,
        ),
        # Past the window's time with measurements missing (passes that never ran: an outage): the
        # window is Argo's count of measurements, not a deadline, so the analysis goes on.
        ([MeasurementResult.SUCCESSFUL] * 2 + [MeasurementResult.INCONCLUSIVE] * 2, 0, 300, AnalysisPhase.RUNNING),
        ([], 0, 300, AnalysisPhase.RUNNING),
    ],
)
def test_analysis_verdicts(results: list[MeasurementResult], limit: int, now: float, phase: AnalysisPhase) -> None:
    analysis = CanaryAnalysis(started_at=0.0)
    for i, result in enumerate(results):
        analysis = record(analysis, result, PodGroupMetrics(2.0, None), now=60.0 * (i + 1))
    assert analysis_phase(analysis, CanaryParams(failure_limit=limit, consecutive_success_limit=0), now) is phase


@pytest.mark.parametrize(
    ("results", "phase"),
    [
        ([MeasurementResult.SUCCESSFUL] * 3, AnalysisPhase.SUCCESSFUL),  # before the window ends
        ([MeasurementResult.SUCCESSFUL] * 2, AnalysisPhase.RUNNING),
        ([MeasurementResult.SUCCESSFUL] * 2 + [MeasurementResult.INCONCLUSIVE, MeasurementResult.SUCCESSFUL],
         AnalysisPhase.RUNNING),  # the run restarts after anything but a success
        ([MeasurementResult.SUCCESSFUL] * 3 + [MeasurementResult.FAILED], AnalysisPhase.FAILED),
    ],
)
def test_consecutive_successes_promote_before_the_window_ends(results: list[MeasurementResult],
                                                             phase: AnalysisPhase) -> None:
    analysis = CanaryAnalysis(started_at=0.0)
    for i, result in enumerate(results):
        analysis = record(analysis, result, PodGroupMetrics(2.0, None), now=30.0 * (i + 1))
    assert analysis_phase(analysis, CanaryParams(consecutive_success_limit=3), 150.0) is phase


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"replicas": 0}, "replicas"),
        ({"analysis_window_s": 0}, "analysisWindow"),
        ({"failure_limit": -1}, "failureLimit"),
        ({"min_promotion_interval_s": -1}, "minPromotionInterval"),
        ({"consecutive_success_limit": -1}, "consecutiveSuccessLimit"),
    ],
)
def test_bad_canary_params_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        CanaryParams(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"sample_threshold": 0}, "sampleThreshold"), ({"max_failures": -1}, "maxFailures")]
)
def test_bad_training_params_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TrainingParams(**kwargs)


def test_a_lasting_shift_signal_does_not_restart_collection_after_a_rejection() -> None:
    """TIDE: once a candidate stops beating the served draft, collection waits for the *next* shift.

    While the signal that started this round is still raised, collection goes on (ShiftPersists, issue
    15 mechanism 5: the served draft is still bad on the new traffic); once it cleared, a signal that
    lasts (no rising edge) does not restart it.
    """
    rejected = step_lifecycle(
        state(Phase.EVALUATING, candidate="r1", candidate_acceptance_length=1.9),
        inputs(shift=True, training=succeeded("r1", 1.9)),
        PARAMS,
        now=1.0,
    ).state
    assert rejected.phase is Phase.COLLECTING
    rejected = step_lifecycle(rejected, inputs(shift=False), PARAMS, now=1.5).state
    assert rejected.phase is Phase.SERVING
    for t in range(2, 20):
        rejected = step_lifecycle(rejected, inputs(shift=True, buffer_samples=10_000), PARAMS, now=float(t)).state
        assert rejected.phase is Phase.SERVING
    again = step_lifecycle(rejected, inputs(shift=True, shift_started=True), PARAMS, now=30.0)
    assert again.state.phase is Phase.COLLECTING


@pytest.mark.parametrize("phase", [Phase.EVALUATING, Phase.CANARY])
def test_a_refused_candidate_is_rolled_back_and_remembered(phase: Phase) -> None:
    analysis = CanaryAnalysis(started_at=0.0, successful=2) if phase is Phase.CANARY else None
    before = state(phase, candidate="r4", candidate_acceptance_length=2.4, canary=analysis, rollbacks=1)
    step = refuse_candidate(before, "ChecksumMismatch", "candidates/r4/model.safetensors: sha256 differs", now=50.0)
    assert step.actions == (act.RollBack("r4", "ChecksumMismatch", "candidates/r4/model.safetensors: sha256 differs"),)
    assert (step.state.phase, step.state.candidate, step.state.canary, step.state.rollbacks) == (
        Phase.ROLLED_BACK, None, None, 2)
    assert (step.state.last_canary_reason, step.state.last_canary_message) == (
        "ChecksumMismatch", "r4 rolled back: candidates/r4/model.safetensors: sha256 differs")
    # Second rollback in a row: collection stops until the next shift.
    after = step_lifecycle(step.state, inputs(), PARAMS, now=55.0)
    assert after.state.phase is Phase.SERVING


def test_a_refusal_without_a_candidate_changes_nothing() -> None:
    collecting = state(Phase.COLLECTING)
    step = refuse_candidate(collecting, "ChecksumMismatch", "late", now=1.0)
    assert (step.actions, step.state) == ((), collecting)


@pytest.mark.parametrize("phase", [Phase.TRAINING, Phase.EVALUATING, Phase.CANARY, Phase.COLLECTING])
def test_capture_switched_off_in_the_spec_stops_capture_in_any_phase(phase: Phase) -> None:
    off = replace(PARAMS, capture=CaptureParams(enabled=False))
    work = {Phase.TRAINING: {"active_run": "r1"},
            Phase.EVALUATING: {"candidate": "r1", "candidate_acceptance_length": 2.5},
            Phase.CANARY: {"candidate": "r1", "candidate_acceptance_length": 2.5,
                           "canary": CanaryAnalysis(started_at=0.0)}}.get(phase, {})
    running = state(phase, **work)
    step = step_lifecycle(running, inputs(), off, now=10.0)
    assert not step.state.capture_enabled
    # Training, Evaluating and Canary pause capture on their own (test_policy_costs.py), under their reason.
    assert [(a.enabled, a.reason) for a in step.actions if isinstance(a, act.SetCapture)] == [
        (False, "CaptureDisabled" if phase is Phase.COLLECTING else step.reason)]

    # A shift while capture is off collects nothing (a shift normally restarts collection).
    quiet = replace(running, capture_enabled=False)
    shifted = step_lifecycle(quiet, inputs(shift=True, shift_started=True), off, now=20.0)
    assert not shifted.state.capture_enabled
    assert not [a for a in shifted.actions if isinstance(a, act.SetCapture)]
