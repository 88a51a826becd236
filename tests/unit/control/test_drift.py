"""Drift detection: warm-up from the first samples, time-weighted EMAs, the shift condition."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from tide_operator.control.drift import DriftParams, DriftState, rise_detected, shift_detected, update_drift

PARAMS = DriftParams(short_half_life_s=120, long_half_life_s=1800, threshold_percent=5, min_samples=200)


def feed(state: DriftState, values: list[float], start: float, step: float = 30, samples: int = 100) -> DriftState:
    for i, a in enumerate(values):
        state = update_drift(state, a, samples, start + i * step, PARAMS)
    return state


def test_warm_up_initialises_both_emas_to_the_sample_weighted_mean() -> None:
    state = update_drift(DriftState(), 0.6, 50, 0, PARAMS)
    assert not state.ready
    state = update_drift(state, 0.8, 150, 30, PARAMS)
    assert state.ready
    assert state.short_ema == pytest.approx(0.75)
    assert state.long_ema == pytest.approx(0.75)


def test_ema_weight_depends_on_elapsed_time_not_on_call_count() -> None:
    warm = feed(DriftState(), [0.7, 0.7], 0)
    one_step = update_drift(warm, 0.3, 100, 30 + 120, PARAMS)  # one short half-life later
    assert one_step.short_ema == pytest.approx(0.5)  # halfway from 0.7 to 0.3
    many = feed(warm, [0.3] * 4, 60, step=30)  # the same 120 s in four polls
    assert many.short_ema == pytest.approx(0.5, abs=1e-9)


@pytest.mark.parametrize(("acceptance", "samples"), [(None, 100), (math.nan, 100), (0.2, 0), (0.2, -1)])
def test_observations_without_data_leave_the_state_unchanged(acceptance: float | None, samples: int) -> None:
    warm = feed(DriftState(), [0.7, 0.7], 0)
    assert update_drift(warm, acceptance, samples, 999, PARAMS) == warm


@pytest.mark.parametrize(
    ("after", "minutes", "shift"),
    [
        (0.70, 10, False),  # no change
        (0.68, 10, False),  # a 3% dip is within the threshold
        (0.55, 3, True),  # a drop shows within minutes
        (0.80, 10, False),  # an improvement is not a shift
    ],
)
def test_shift_is_short_below_long_minus_threshold(after: float, minutes: int, shift: bool) -> None:
    state = feed(DriftState(), [0.70] * 60, 0)  # 30 minutes of steady traffic
    state = feed(state, [after] * (minutes * 2), 60 * 30)
    assert shift_detected(state, PARAMS) == shift


def test_noise_alone_does_not_signal_a_shift() -> None:
    rng = random.Random(1)
    state = DriftState()
    for tick in range(600):  # five hours of 30 s polls, +-3% noise
        state = update_drift(state, 0.7 * (1 + rng.gauss(0, 0.03)), 100, tick * 30.0, PARAMS)
        assert not shift_detected(state, PARAMS)


def test_a_gap_in_data_does_not_erase_the_long_memory() -> None:
    state = feed(DriftState(), [0.7] * 60, 0)
    state = update_drift(state, 0.4, 100, 60 * 30 + 3 * 3600, PARAMS)  # speculation was off for 3 hours
    assert state.long_ema is not None
    assert state.long_ema > 0.65
    assert shift_detected(state, PARAMS)


def test_a_raised_signal_holds_until_short_recovers_to_half_the_threshold() -> None:
    # long = 0.70, threshold 5%: the signal rises below 0.665 and, once up, falls only above 0.6825.
    at = {short: DriftState(short_ema=short, long_ema=0.70, updated_at=0) for short in (0.66, 0.67, 0.69)}
    assert shift_detected(at[0.66], PARAMS)
    assert not shift_detected(at[0.67], PARAMS)
    assert shift_detected(at[0.67], PARAMS, active=True)  # inside the band: still up
    assert not shift_detected(at[0.69], PARAMS, active=True)  # recovered past the band: re-armed


def test_one_shift_gives_one_rising_edge_while_the_long_ema_slides_down() -> None:
    """The e2e's case: after a drop the ratio short/long crawls back up past the threshold as the long
    EMA follows; noise there used to raise the signal again and again, each edge restarting training."""
    rng = random.Random(7)
    state, active, edges = feed(DriftState(), [0.70] * 60, 0), False, 0
    for tick in range(240):  # two hours on the new level, +-3% noise
        state = update_drift(state, 0.50 * (1 + rng.gauss(0, 0.03)), 100, 60 * 30 + tick * 30.0, PARAMS)
        now = shift_detected(state, PARAMS, active=active)
        edges += now and not active
        active = now
    assert edges == 1


def test_no_shift_before_warm_up() -> None:
    assert not shift_detected(update_drift(DriftState(), 0.1, 10, 0, PARAMS), PARAMS)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"short_half_life_s": 0}, "shortHalfLife"),
        ({"long_half_life_s": 60}, "longHalfLife"),
        ({"threshold_percent": 0}, "thresholdPercent"),
        ({"min_samples": 0}, "minSamples"),
    ],
)
def test_bad_drift_params_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DriftParams(**kwargs)


def test_a_seed_from_one_canary_weighs_as_a_short_half_life_not_a_long_one() -> None:
    """After a promotion both EMAs start at the canary's live acceptance. Held as a plain EMA's memory,
    a canary that read 3% high kept the long EMA above the fleet's true level for half an hour, and
    ordinary noise on the short EMA crossed the threshold (a false shift cancelled the next training run
    in the policy bench). Weighed as the evidence it is, the long EMA joins the fleet's level."""
    params = DriftParams()
    noise = random.Random(5)
    seeded = DriftState(short_ema=0.56, long_ema=0.56, updated_at=0.0, warmup_samples=params.min_samples,
                        long_evidence_s=params.short_half_life_s)
    plain = replace(seeded, long_evidence_s=None)
    shifts = {"seeded": 0, "plain": 0}
    for name, start in (("seeded", seeded), ("plain", plain)):
        state = start
        for i in range(1, 61):  # 30 minutes of the fleet at 0.52 with 2% noise per pass
            state = update_drift(state, 0.52 * (1 + noise.gauss(0, 0.02)), 5000, 30.0 * i, params)
            shifts[name] += shift_detected(state, params)
        if name == "seeded":
            assert state.long_ema == pytest.approx(0.52, abs=0.01)
    assert shifts["seeded"] == 0
    assert shifts["plain"] > 0


def test_a_large_drop_right_after_a_seed_is_still_a_shift() -> None:
    params = DriftParams()
    state = DriftState(short_ema=0.74, long_ema=0.74, updated_at=0.0, warmup_samples=params.min_samples,
                       long_evidence_s=params.short_half_life_s)
    seen = []
    for i in range(1, 21):
        state = update_drift(state, 0.15, 5000, 30.0 * i, params)
        seen.append(shift_detected(state, params))
    assert any(seen[:12])  # within six minutes


def test_a_rise_is_the_mirror_of_a_shift_with_the_same_band() -> None:
    # long = 0.60, threshold 5%: the rise signal is up above 0.63 and, once up, falls only below 0.615.
    at = {short: DriftState(short_ema=short, long_ema=0.60, updated_at=0) for short in (0.64, 0.62, 0.61)}
    assert rise_detected(at[0.64], PARAMS)
    assert not rise_detected(at[0.62], PARAMS)
    assert rise_detected(at[0.62], PARAMS, active=True)
    assert not rise_detected(at[0.61], PARAMS, active=True)
    assert not shift_detected(at[0.64], PARAMS)  # a rise is never a shift


def test_a_return_home_gives_one_rise_edge_and_noise_none() -> None:
    """The recurring workload's return: acceptance goes up from 0.48 to 0.59, no fall is seen."""
    rng = random.Random(3)
    state = DriftState()
    for tick in range(600):  # noise alone, five hours: no rise
        state = update_drift(state, 0.48 * (1 + rng.gauss(0, 0.03)), 100, tick * 30.0, PARAMS)
        assert not rise_detected(state, PARAMS)
    active, edges = False, 0
    for tick in range(240):
        state = update_drift(state, 0.59 * (1 + rng.gauss(0, 0.03)), 100, 600 * 30.0 + tick * 30.0, PARAMS)
        now = rise_detected(state, PARAMS, active=active)
        edges += now and not active
        active = now
        assert not shift_detected(state, PARAMS)
    assert edges == 1
