"""The speculation decision: margin, hysteresis, dwell, modes, pause and missing observations."""

from __future__ import annotations

import math
import random

import pytest

from tide_operator.control.cost_model import CostPoint, CostProfile, best_speculative_tokens
from tide_operator.control.speculation import (
    REASON_DWELL,
    REASON_MEASURING,
    REASON_MODE_OFF,
    REASON_MODE_ON,
    REASON_NO_DRAFT,
    REASON_NO_OBSERVATION,
    REASON_PAUSED,
    REASON_SPEEDUP_ABOVE_MARGIN,
    REASON_SPEEDUP_BELOW_HYSTERESIS,
    REASON_WITHIN_HYSTERESIS,
    DecisionParams,
    SpeculationAction,
    SpeculationInput,
    SpeculationMode,
    SpeculationState,
    decide_speculation,
)

PARAMS = DecisionParams(speedup_margin_percent=5, hysteresis_percent=3, min_dwell_s=120)
# With a flat profile (c = 0.1, beta = 1), speedup at g = 1 is (1 + a) / 1.1: easy to aim at.
PROFILE = CostProfile((CostPoint(1, 0.1, 1.0),))


def rate_for(speedup: float) -> float:
    """The acceptance rate whose best modelled speedup (g <= 1) equals `speedup`."""
    return speedup * 1.1 - 1


def decide(speedup: float | None, state: SpeculationState, now: float = 1000.0, **kwargs: object):
    a = None if speedup is None else rate_for(speedup)
    observed = SpeculationInput(a, kwargs.pop("batch_size", 8.0), 1, has_draft=kwargs.pop("has_draft", True))
    mode = kwargs.pop("mode", SpeculationMode.ADAPTIVE)
    return decide_speculation(observed, state, mode, PARAMS, now, profile=PROFILE, **kwargs)


OFF = SpeculationState(enabled=False, changed_at=0.0)
ON = SpeculationState(enabled=True, changed_at=0.0)


def run(speedup: float, state: SpeculationState, start: float = 1000.0, ticks: int = 10) -> list:
    """Feed one speedup every 30 s; returns the decisions."""
    decisions = []
    for i in range(ticks):
        decision = decide(speedup, state, now=start + 30.0 * i)
        decisions.append(decision)
        state = decision.state
    return decisions


@pytest.mark.parametrize(
    ("state", "speedup", "switch", "reason"),
    [
        (OFF, 1.10, SpeculationAction.ENABLE, REASON_SPEEDUP_ABOVE_MARGIN),
        (OFF, 1.04, None, REASON_WITHIN_HYSTERESIS),  # not above 1 + margin
        (OFF, 0.95, None, REASON_WITHIN_HYSTERESIS),
        (ON, 1.03, None, REASON_WITHIN_HYSTERESIS),  # above 1 + margin - hysteresis
        (ON, 1.10, None, REASON_SPEEDUP_ABOVE_MARGIN),
        (ON, 1.01, SpeculationAction.DISABLE, REASON_SPEEDUP_BELOW_HYSTERESIS),
        (ON, 0.95, SpeculationAction.DISABLE, REASON_SPEEDUP_BELOW_HYSTERESIS),
    ],
)
def test_thresholds_hysteresis_and_min_dwell(
    state: SpeculationState, speedup: float, switch: SpeculationAction | None, reason: str
) -> None:
    decisions = run(speedup, state)
    actions = [d.action for d in decisions]
    if switch is None:
        assert set(actions) == {SpeculationAction.HOLD}
        assert decisions[-1].reason == reason
        assert decisions[-1].state.enabled == state.enabled
        return
    # The condition must hold at every observation for min_dwell (120 s = the 5th 30 s tick).
    assert actions == [SpeculationAction.HOLD] * 4 + [switch] + [SpeculationAction.HOLD] * 5
    assert {d.reason for d in decisions[:4]} == {REASON_DWELL}
    assert decisions[4].reason == reason
    assert f"speedup={speedup:.3f}" in decisions[4].message
    assert decisions[4].state == SpeculationState(enabled=not state.enabled, changed_at=1000.0 + 120.0)


def test_one_contrary_observation_restarts_the_dwell() -> None:
    state = ON
    for i, speedup in enumerate([0.95, 0.95, 0.95, 1.1, 0.95, 0.95, 0.95, 0.95]):
        decision = decide(speedup, state, now=30.0 * i)
        assert decision.action is SpeculationAction.HOLD
        state = decision.state
    assert decide(0.95, state, now=30.0 * 8).action is SpeculationAction.DISABLE  # 120 s after the blip


@pytest.mark.parametrize(
    ("kwargs", "state", "action", "reason"),
    [
        ({"paused": True}, ON, SpeculationAction.HOLD, REASON_PAUSED),
        ({"paused": True}, OFF, SpeculationAction.HOLD, REASON_PAUSED),
        ({"mode": SpeculationMode.ON}, OFF, SpeculationAction.ENABLE, REASON_MODE_ON),
        ({"mode": SpeculationMode.OFF}, ON, SpeculationAction.DISABLE, REASON_MODE_OFF),
        ({"has_draft": False}, ON, SpeculationAction.DISABLE, REASON_NO_DRAFT),
    ],
)
def test_pause_modes_and_missing_draft_override_the_model(
    kwargs: dict, state: SpeculationState, action: SpeculationAction, reason: str
) -> None:
    speedup = 1.5 if state is OFF else 0.5  # the model would say the opposite
    decision = decide(speedup, state, **kwargs)
    assert (decision.action, decision.reason) == (action, reason)


@pytest.mark.parametrize(
    ("state", "speedup", "batch_size"),
    [
        (ON, None, 8.0),  # speculating but no acceptance data in the window (no traffic)
        (ON, 1.5, None),
        (OFF, 1.5, None),
        (ON, 1.5, math.nan),
        (OFF, 1.5, math.nan),
        (ON, None, None),
        (OFF, None, None),  # Prometheus down
    ],
)
def test_missing_observations_hold_the_current_state(
    state: SpeculationState, speedup: float | None, batch_size: float | None
) -> None:
    decision = decide(speedup, state, batch_size=batch_size)
    assert (decision.action, decision.reason, decision.state) == (
        SpeculationAction.HOLD,
        REASON_NO_OBSERVATION,
        state,
    )


@pytest.mark.parametrize("state", [SpeculationState(), OFF])
def test_an_unmeasured_draft_is_switched_on_to_measure_it(state: SpeculationState) -> None:
    decision = decide(None, state, batch_size=4.0)
    assert (decision.action, decision.reason) == (SpeculationAction.ENABLE, REASON_MEASURING)
    assert decide(None, SpeculationState(), batch_size=None).action is SpeculationAction.HOLD  # Prometheus down


def test_noise_around_the_threshold_does_not_flap() -> None:
    """Speedup hovering between the thresholds with noise that crosses both now and then."""
    rng = random.Random(4)
    state, switches = OFF, 0
    for tick in range(240):  # two hours of 30 s ticks
        noisy = 1.035 + rng.gauss(0, 0.01)
        decision = decide(noisy, state, now=tick * 30.0)
        switches += decision.action is not SpeculationAction.HOLD
        state = decision.state
    assert switches <= 1


def test_switches_are_at_least_min_dwell_apart_under_any_input() -> None:
    rng = random.Random(9)
    state, last_switch = SpeculationState(), None
    for tick in range(400):
        now = tick * 30.0
        decision = decide(rng.choice([0.95, 1.5]), state, now=now)
        if decision.action is not SpeculationAction.HOLD:
            if last_switch is not None:
                assert now - last_switch >= PARAMS.min_dwell_s
            last_switch = now
        state = decision.state


def test_adaptive_g_is_the_models_best_and_fixed_g_uses_the_maximum() -> None:
    profile = CostProfile((CostPoint(1, 0.05, 1.0),))
    adaptive = SpeculationInput(0.8, 1.0, 12)
    fixed = SpeculationInput(0.8, 1.0, 3, adaptive_tokens=False)
    on = SpeculationState(enabled=True)
    assert (
        decide_speculation(adaptive, on, SpeculationMode.ADAPTIVE, PARAMS, 0, profile=profile).speculative_tokens
        == (best_speculative_tokens(0.8, 1.0, 12, profile)[0])
    )
    assert decide_speculation(fixed, on, SpeculationMode.ADAPTIVE, PARAMS, 0, profile=profile).speculative_tokens == 3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"speedup_margin_percent": -1}, "speedupMarginPercent"),
        ({"min_dwell_s": -5}, "minDwell"),
        ({"hysteresis_percent": -1}, "hysteresisPercent"),
        ({"probe_interval_s": -1}, "probeInterval"),
    ],
)
def test_bad_decision_params_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DecisionParams(**kwargs)
