"""The first draft's canary: no served draft to beat (the pods ran the bootstrap head at K=0), so it is
promoted only when its live acceptance models a speedup above speculation's on-threshold at the observed
load and the canary pods keep the control pods' throughput; otherwise it is rolled back to the head."""

from __future__ import annotations

import pytest

from tide_operator.control import actions as act
from tide_operator.control.canary import (
    CanaryAnalysis,
    CanaryParams,
    FirstDraftParams,
    MeasurementResult,
    PodGroupMetrics,
    first_draft_speedup,
    measure_first_draft,
)
from tide_operator.control.lifecycle import LifecycleInput, LifecycleParams, LifecycleState, Phase, step_lifecycle
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide

FIRST = FirstDraftParams(speculative_tokens=3, min_speedup=1.05)
CANARY = CanaryParams(max_throughput_loss_percent=5.0)


@pytest.mark.parametrize(("length", "batch", "canary_tps", "control_tps", "expected"), [
    (2.5, 4, 120.0, 100.0, MeasurementResult.SUCCESSFUL),  # 1.53x modelled, faster than control
    (2.0, 64, 100.0, 100.0, MeasurementResult.SUCCESSFUL),  # 1.16x at a busy batch
    (2.5, 4, 94.0, 100.0, MeasurementResult.FAILED),  # 6% slower than the pods at K=0: guard wins
    (2.5, 4, 95.0, 100.0, MeasurementResult.SUCCESSFUL),  # exactly the allowed loss
    (1.3, 4, 101.0, 100.0, MeasurementResult.INCONCLUSIVE),  # 1.02x: above 1, not above 1 + margin
    (1.2, 4, 101.0, 100.0, MeasurementResult.FAILED),  # best g is 0: speculating would not pay
    (2.5, 256, 100.0, 100.0, MeasurementResult.SUCCESSFUL),  # 1.09x even near saturation
    (1.5, 256, 100.0, 100.0, MeasurementResult.FAILED),  # the same draft a busy fleet cannot use
    (None, 4, 100.0, 100.0, MeasurementResult.INCONCLUSIVE),  # the canary has not drafted yet
    (2.5, None, 100.0, 100.0, MeasurementResult.INCONCLUSIVE),  # no load observed
    (float("nan"), 4, 100.0, 100.0, MeasurementResult.INCONCLUSIVE),
    (2.5, 4, 100.0, None, MeasurementResult.SUCCESSFUL),  # no control pods (one replica): the model decides
])
def test_first_draft_measurement(length: float | None, batch: float | None, canary_tps: float,
                                 control_tps: float | None, expected: MeasurementResult) -> None:
    result = measure_first_draft(PodGroupMetrics(length, canary_tps), PodGroupMetrics(1.0, control_tps), batch,
                                 CANARY, FIRST)
    assert result is expected


def test_the_speedup_is_the_cost_models_best_g() -> None:
    assert first_draft_speedup(PodGroupMetrics(2.5, None), 4, FIRST) == pytest.approx(1.532, abs=1e-3)
    assert first_draft_speedup(PodGroupMetrics(1.0, None), 4, FIRST) == 1.0


def _canary_state() -> LifecycleState:
    return LifecycleState(phase=Phase.CANARY, phase_since=0.0, target_revision="r", capture_enabled=True,
                          candidate="r1", candidate_acceptance_length=2.4, canary=CanaryAnalysis(started_at=0.0))


def _inputs(length: float, canary_tps: float, *, first: bool) -> LifecycleInput:
    return LifecycleInput(shift=False, buffer_samples=0, served_acceptance_length=1.0 if first else 2.4,
                          target_revision="r", canary=PodGroupMetrics(length, canary_tps),
                          control=PodGroupMetrics(None, 100.0), first_draft=first, batch_size=4.0)


PARAMS = LifecycleParams(canary=CanaryParams(analysis_window_s=300, measurement_interval_s=60,
                                             consecutive_success_limit=3), first_draft=FIRST)


def _run(length: float, canary_tps: float, *, first: bool) -> list[object]:
    """Measurements once a minute until the lifecycle leaves the canary; the actions of the last pass."""
    lc = _canary_state()
    for minute in range(1, 7):
        step = step_lifecycle(lc, _inputs(length, canary_tps, first=first), PARAMS, 60.0 * minute)
        lc = step.state
        if lc.phase is not Phase.CANARY:
            return list(step.actions)
    raise AssertionError("the canary never ended")


def test_a_first_draft_that_pays_for_speculation_is_promoted() -> None:
    actions = _run(2.0, 110.0, first=True)
    assert [type(a) for a in actions] == [act.Promote]
    assert actions[0].message.startswith("first draft, judged by modelled speedup")  # type: ignore[attr-defined]


def test_a_first_draft_that_is_slower_than_the_pods_at_k0_is_rolled_back_to_the_head() -> None:
    actions = _run(2.0, 80.0, first=True)
    assert [type(a) for a in actions] == [act.RollBack]
    assert actions[0].candidate == "r1"  # type: ignore[attr-defined]


def test_a_first_draft_below_the_margin_is_not_promoted() -> None:
    # 1.3 tokens per step models 1.02x at batch 4: better than nothing, not worth switching speculation on.
    assert [type(a) for a in _run(1.3, 101.0, first=True)] == [act.RollBack]


def test_later_drafts_are_still_judged_against_the_served_draft() -> None:
    # The same live numbers against a served length of 2.4: clearly worse, rolled back.
    assert [type(a) for a in _run(2.0, 110.0, first=False)] == [act.RollBack]


def test_the_policy_marks_the_first_draft_and_passes_its_threshold() -> None:
    params = PolicyParams(target_revision="r", num_speculative_tokens=3)
    canary = PolicyState(lifecycle=_canary_state())
    seen = Observation(batch_size=4.0, canary=PodGroupMetrics(2.0, 110.0), control=PodGroupMetrics(None, 100.0))
    now = 60.0
    for _ in range(3):
        actions, canary = decide(seen, canary, params, now)
        now += 60.0
    assert any(isinstance(a, act.Promote) for a in actions)
    promoted = Observation(batch_size=4.0, promoted_version="v1", canary=PodGroupMetrics(2.0, 110.0),
                           control=PodGroupMetrics(2.4, 100.0))
    later, seen_actions = PolicyState(lifecycle=_canary_state()), []
    for now in (60.0, 120.0, 180.0):
        actions, later = decide(promoted, later, params, now)
        seen_actions += actions
    assert any(isinstance(a, act.RollBack) for a in seen_actions)
