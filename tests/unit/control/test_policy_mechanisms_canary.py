"""Issue 15, mechanisms 3 and 4: what a canary measured, and how its measurements are judged.

3. After a promotion the served draft's per-token acceptance must come from what the canary pods
   ran, not from the fleet's g at the promotion pass.
4. A measurement fails only when the canary is worse than control by more than the noise the
   analysis has measured: two equal drafts must not fail a third of their canaries.
"""

from __future__ import annotations

import json
import random

import pytest

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
from tide_operator.control.cost_model import expected_acceptance_length
from tide_operator.control.lifecycle import LifecycleInput, LifecycleParams, LifecycleState, Phase, step_lifecycle
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide
from tide_operator.control.restart import lifecycle_from_dict, lifecycle_to_dict
from tide_operator.control.speculation import SpeculationState

# ---------------------------------------------------------------- mechanism 3

TRUE_A, CONTROL_A = 0.518, 0.45
TABLE = ((1, 64, 3), (65, 256, 1))  # the fleet runs g=3 at low load and g=1 at batch 200


def _canary_policy_state() -> PolicyState:
    lifecycle = LifecycleState(phase=Phase.CANARY, phase_since=0.0, target_revision="rev-1", run_counter=1,
                               candidate="r1", candidate_acceptance_length=2.2, capture_enabled=True,
                               canary=CanaryAnalysis(started_at=0.0), canary_pods=("pod-0",))
    return PolicyState(speculation=SpeculationState(enabled=True, changed_at=-3600.0), lifecycle=lifecycle,
                       acceptance_estimate=CONTROL_A, table=TABLE, table_acceptance=CONTROL_A)


def _observe(batch: float, canary: PodGroupMetrics) -> Observation:
    g = 3 if batch <= 64 else 1  # the control pods run the fleet's table like the canary pods
    control = PodGroupMetrics(expected_acceptance_length(CONTROL_A, g), 100.0)
    return Observation(per_position_acceptance=(CONTROL_A,), batch_size=batch, acceptance_samples=5000,
                       promoted_version="v1", canary=canary, control=control, ready_pods=("pod-0", "pod-1"))


def _promote_after_load_rises(canary: PodGroupMetrics, at_200: PodGroupMetrics | None = None
                              ) -> tuple[list[act.Action], PolicyState]:
    """The canary is measured at batch 16 (g=3); the load is at 200 (g=1) in the pass that promotes."""
    params = PolicyParams(target_revision="rev-1",
                          canary=CanaryParams(analysis_window_s=300, consecutive_success_limit=0))
    state = _canary_policy_state()
    for now in range(30, 271, 30):  # four of the window's five measurements at batch 16
        _, state = decide(_observe(16, canary), state, params, float(now))
        assert state.lifecycle.phase is Phase.CANARY
    return decide(_observe(200, at_200 or canary), state, params, 300.0)  # the fifth, then the verdict


def test_promoted_estimate_uses_the_g_the_canary_ran_not_the_fleets_g_at_promotion() -> None:
    canary = PodGroupMetrics(expected_acceptance_length(TRUE_A, 3), 100.0)  # mean length only
    at_200 = PodGroupMetrics(expected_acceptance_length(TRUE_A, 1), 100.0)  # the canary pods run g=1 there too
    actions, state = _promote_after_load_rises(canary, at_200)
    assert any(isinstance(a, act.Promote) for a in actions)
    # The fleet's g at batch 200 is 1: inverting the g=3 length with it gives 0.925.
    assert state.acceptance_estimate == pytest.approx(TRUE_A, abs=0.005)


def test_promoted_estimate_prefers_the_canarys_position0_acceptance() -> None:
    # Over the rate window the canary ran several g: position 0's acceptance is a whatever g ran.
    canary = PodGroupMetrics(2.3, 100.0, per_token_acceptance=TRUE_A)
    actions, state = _promote_after_load_rises(canary)
    assert any(isinstance(a, act.Promote) for a in actions)
    assert state.acceptance_estimate == pytest.approx(TRUE_A)
    assert state.lifecycle.promoted_acceptance == pytest.approx(TRUE_A)


def test_canary_analysis_with_its_samples_survives_a_restart_and_old_status_loads() -> None:
    analysis = CanaryAnalysis(started_at=0.0)
    canary, control = PodGroupMetrics(2.2, 98.0, per_token_acceptance=0.6), PodGroupMetrics(2.0, 100.0)
    for now in (60.0, 120.0):
        analysis = record(analysis, measure(canary, control, CanaryParams(), analysis), canary, now, control)
    before = LifecycleState(phase=Phase.CANARY, candidate="r1", canary=analysis, promoted_acceptance=0.5)
    assert lifecycle_from_dict(json.loads(json.dumps(lifecycle_to_dict(before)))) == before
    old = {"phase": "Canary", "candidate": "r1", "promoted_acceptance_length": 2.1,
           "canary": {"started_at": 0.0, "successful": 1, "canary_length_sum": 2.2, "with_length": 1,
                      "measured_at": 60.0, "consecutive_successes": 1}}
    restored = lifecycle_from_dict(old)
    assert restored.canary is not None
    assert restored.canary.mean_canary_length == pytest.approx(2.2)
    assert restored.canary.length_gains == ()
    assert restored.promoted_acceptance is None


# ---------------------------------------------------------------- mechanism 4

NOISE = 0.03  # relative sd of one group's acceptance length and throughput per query (the policy bench's)
PARAMS = LifecycleParams(canary=CanaryParams(analysis_window_s=300, measurement_interval_s=60))


def _run_canary(gain: float, rng: random.Random) -> str:
    """One canary through the lifecycle, 30 s passes, both groups' numbers noisy; returns its outcome."""
    state = LifecycleState(phase=Phase.CANARY, phase_since=0.0, target_revision="rev-1", run_counter=1,
                           candidate="r1", candidate_acceptance_length=2.4, capture_enabled=True,
                           canary=CanaryAnalysis(started_at=0.0))
    for now in range(30, 331, 30):
        def noisy(x: float) -> float:
            return x * (1 + rng.gauss(0, NOISE))
        canary = PodGroupMetrics(noisy(2.0 * (1 + gain)), noisy(100.0))
        control = PodGroupMetrics(noisy(2.0), noisy(100.0))
        given = LifecycleInput(shift=False, buffer_samples=0, served_acceptance_length=2.0, target_revision="rev-1",
                               canary=canary, control=control)
        step = step_lifecycle(state, given, PARAMS, float(now))
        state = step.state
        if state.phase is not Phase.CANARY:
            return step.reason
    raise AssertionError("the canary outlived its window")


def _outcomes(gain: float, runs: int = 400) -> dict[str, float]:
    rng = random.Random(15)
    reasons = [_run_canary(gain, rng) for _ in range(runs)]
    return {r: reasons.count(r) / runs for r in ("CanarySuccessful", "CanaryFailed", "CanaryInconclusive")}


def test_two_equal_drafts_rarely_fail_a_canary() -> None:
    # Before: a 2% band against two 3% noises (and a 5% throughput guard against the same), with up to
    # five measurements and failureLimit 0, failed an equal candidate in 90% of its canaries.
    outcomes = _outcomes(0.0)
    assert outcomes["CanaryFailed"] <= 0.10
    assert outcomes["CanarySuccessful"] <= 0.10


def test_a_clearly_better_draft_is_promoted_and_a_clearly_worse_one_fails() -> None:
    # Before: 10% better was promoted in 69% of its canaries (the throughput guard's noise failed the rest).
    assert _outcomes(0.10)["CanarySuccessful"] >= 0.80
    assert _outcomes(-0.10)["CanaryFailed"] >= 0.90


def test_a_failure_needs_a_noise_estimate_then_more_failures_than_the_limit() -> None:
    params = CanaryParams(consecutive_success_limit=0)
    worse, control = PodGroupMetrics(1.6, 100.0), PodGroupMetrics(2.0, 100.0)
    analysis = CanaryAnalysis(started_at=0.0)
    first = measure(worse, control, params, analysis)
    assert first is MeasurementResult.INCONCLUSIVE  # one difference says nothing about its noise
    analysis = record(analysis, first, worse, 60.0, control)
    second = measure(worse, control, params, analysis)
    assert second is MeasurementResult.FAILED  # -20% twice: no spread, the 2% band applies
    analysis = record(analysis, second, worse, 120.0, control)
    assert analysis_phase(analysis, params, 120.0) is AnalysisPhase.FAILED
    assert analysis_phase(analysis, CanaryParams(failure_limit=1, consecutive_success_limit=0),
                          120.0) is AnalysisPhase.RUNNING


def test_the_band_widens_with_the_measured_spread() -> None:
    params = CanaryParams()
    control = PodGroupMetrics(2.0, 100.0)
    analysis = CanaryAnalysis(started_at=0.0)
    for length in (2.3, 1.9, 2.25):  # +15%, -5%, +12.5%: mean +7.5%, but the spread is as large
        canary = PodGroupMetrics(length, 100.0)
        analysis = record(analysis, measure(canary, control, params, analysis), canary, 60.0, control)
    assert measure(PodGroupMetrics(1.96, 100.0), control, params, analysis) is MeasurementResult.INCONCLUSIVE
