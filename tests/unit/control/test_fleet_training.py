"""Whether a training run pays while its GPUs could serve (control/fleet_training.py)."""

from __future__ import annotations

import pytest

from tide_operator.control.cost_model import expected_acceptance_length
from tide_operator.control.fleet_training import (
    REGIME_PRIOR_S,
    TRAINED_ACCEPTANCE,
    LoadRegime,
    TrainingValue,
    keep_training,
    reachable_acceptance,
)

C_S, C_T = 54.08, 4.0  # TIDE's 8xH100 and 4xMI250


def _value(s: float, s_star: float, rest: float, run: float = 600.0) -> TrainingValue:
    return TrainingValue(C_S, C_T, s, s_star, rest, run)


@pytest.mark.parametrize(("value", "running", "pays"), [
    (_value(1.0, 1.5, 3000), False, True),  # a bad draft under long, light load: train
    (_value(1.3, 1.3, 1e9), False, False),  # the served draft is as good as training gets
    (_value(1.0, 1.05, 900), False, False),  # a burst: little to gain before the load moves
    (_value(1.0, 1.5, 500), False, False),  # the load will not hold as long as the run
    # The hysteresis: gain 54.08 x 0.1 x 300 = 1622 against cost 4 x 1.1 x 600 = 2640.
    (_value(1.1, 1.2, 900), True, True),  # a running run goes on above half its cost
    (_value(1.1, 1.2, 900), False, False),  # a new one needs 1.5 times it
])
def test_training_pays(value: TrainingValue, running: bool, pays: bool) -> None:
    assert value.pays(running) is pays


def test_the_message_says_what_was_weighed() -> None:
    message = _value(1.0, 1.05, 900).message()
    assert "1.000 -> 1.050" in message
    assert "900s" in message
    assert "600s" in message


def test_a_regime_holds_within_the_band_and_ends_outside_it() -> None:
    regime = LoadRegime(0.0, 20.0)
    assert regime.observe(35.0, None, 100.0).since == 0.0  # within a factor of two
    assert regime.expected_rest(100.0) == REGIME_PRIOR_S  # no regime ended yet: the prior
    burst = regime.observe(300.0, None, 600.0)
    assert (burst.since, burst.batch, burst.typical_s) == (600.0, 300.0, 600.0)
    assert burst.expected_rest(700.0) == 600.0  # as long as regimes last here
    assert burst.expected_rest(2000.0) == 1400.0  # or as long again as this one has held
    back = burst.observe(20.0, None, 900.0)
    assert back.typical_s == (600.0 + 300.0) / 2
    assert back.observe(None, None, 950.0).since == 900.0  # no reading changes nothing


def test_the_best_promoted_acceptance_is_remembered() -> None:
    regime = LoadRegime(0.0, 20.0).observe(20.0, 0.75, 10.0).observe(20.0, 0.6, 20.0).observe(20.0, None, 30.0)
    assert regime.best_promoted == 0.75
    assert reachable_acceptance(regime.best_promoted) == 0.75
    assert reachable_acceptance(None) == TRAINED_ACCEPTANCE
    assert expected_acceptance_length(TRAINED_ACCEPTANCE, 3) == pytest.approx(2.5)


def test_a_running_run_is_weighed_again_only_after_the_load_moved() -> None:
    poor = _value(1.0, 1.0, 0.0)  # would never pay
    steady = LoadRegime(0.0, 20.0)
    assert keep_training(poor, steady, running_since=100.0)  # noise in the readings never cancels a run
    moved = LoadRegime(500.0, 300.0, 500.0)
    assert not keep_training(poor, moved, running_since=100.0)
    assert not keep_training(poor, steady, running_since=None)
    assert keep_training(_value(1.0, 1.5, 3000), moved, running_since=100.0)


def _speedup(acceptance: float) -> float:
    return 1.0 + acceptance  # any increasing model: the verdict compares s and s*


def test_the_verdict_tracks_the_load_not_the_batch_per_engine() -> None:
    from tide_operator.control.fleet_training import VerdictInput, training_verdict

    def reading(now: float, batch: float, load: float | None) -> VerdictInput:
        return VerdictInput(now, batch, 0.5, None, serving_rate=10.0, lend_rate=10.0, run_s=30.0, load=load)

    regime, _ = training_verdict(None, reading(0.0, 8.0, 8.0), _speedup)
    # Lent replicas triple the engines: the batch per engine falls to a third, the load stays.
    regime, held = training_verdict(regime, reading(600.0, 8.0 / 3, 8.0), _speedup)
    assert regime is not None
    assert regime.since == 0.0  # the same regime: R is its 600 s or the prior, not the lending's moment
    assert held is None  # s 1.5 -> s* 1.69 over 1170 s pays 30 s of the lent GPUs
    by_batch, _ = training_verdict(None, reading(0.0, 8.0, None), _speedup)
    by_batch, held = training_verdict(by_batch, reading(600.0, 8.0 / 3, None), _speedup)
    assert by_batch is not None
    assert by_batch.since == 600.0  # without the load the batch per engine ends the regime


def test_no_reading_no_verdict() -> None:
    from tide_operator.control.fleet_training import VerdictInput, training_verdict

    regime, held = training_verdict(None, VerdictInput(0.0, None, 0.5, None, 10.0, 10.0), _speedup)
    assert (regime, held) == (None, None)
    regime, held = training_verdict(None, VerdictInput(0.0, 4.0, None, None, 10.0, 10.0), _speedup)
    assert regime is not None
    assert held is None  # no acceptance known: training as TIDE's


def test_a_running_run_is_weighed_net_of_the_lent_replicas_startup() -> None:
    from tide_operator.control.fleet_training import VerdictInput, training_verdict

    # Cancelling a run frees GPUs that serve only once lent replicas start: with 300 s of the run left and
    # 240 s to start, cancelling wins 60 s of lent serving, not 300 s.
    assert TrainingValue(C_S, C_T, 1.1, 1.2, 900, 300, idle_s=240).cost == pytest.approx(C_T * 1.1 * 60)
    assert TrainingValue(C_S, C_T, 1.1, 1.2, 900, 200, idle_s=240).cost == 0.0
    moved = LoadRegime(500.0, 300.0, 500.0)  # the load moved since the run started: it is weighed again

    def reading(startup_s: float, running_since: float | None) -> VerdictInput:
        return VerdictInput(1000.0, 300.0, 0.5, None, serving_rate=10.0, lend_rate=10.0, run_s=1020.0,
                            running_since=running_since, regime_prior_s=600.0, startup_s=startup_s)

    # 320 s of the run left, R 500 s: gain 10 x 0.19 x 180 = 342 against 10 x 1.5 x 320 = 4800 (x 0.5).
    assert training_verdict(moved, reading(0.0, 300.0), _speedup)[1] is not None  # preempted
    # Net of a 300 s startup cancelling frees 20 s: 342 against 300 x 0.5, so the run goes on.
    assert training_verdict(moved, reading(300.0, 300.0), _speedup)[1] is None
    assert training_verdict(moved, reading(300.0, None), _speedup)[1] is not None  # a new run pays in full
