"""The placement benchmark can fail: its check on constructed rows, TIDE's steady split reproduced, and the
operator's fleet without its training verdict missing a phase target on a bursty scenario."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench.placement_sim import report  # noqa: E402
from bench.placement_sim.fleet import SHAPES, Lender  # noqa: E402
from bench.policy_sim.generator import generate  # noqa: E402
from bench.policy_sim.operator_driver import operator_params  # noqa: E402
from tide_operator.control.fleet import LendTiming, Routing  # noqa: E402

TIDE = SHAPES[0].name


def _row(phase: str, scenario: str = "s", shape: str = TIDE, **values: float) -> report.Row:
    base = {"all-inference": 1.0, "fixed split": 1.1, "ours": 1.15}
    return report.Row(shape, Routing.WEIGHTED, scenario, phase, {**base, **values})


def test_check_passes_rows_that_meet_every_target() -> None:
    steady = _row(report.OVERALL, "steady-s1.15", **{"fixed split": 1.075})
    rows = [_row("p1", ours=1.068), _row(report.OVERALL), steady]
    assert report.check(rows) == []


@pytest.mark.parametrize(("row", "miss"), [
    (_row("p1", ours=1.066), "s/p1: ours 1.066 < 0.97 x the better baseline 1.100"),
    (_row(report.OVERALL, ours=1.099), "s/OVERALL: ours 1.099 < the better baseline 1.100"),
    (_row(report.OVERALL, **{"all-inference": 1.2}), "s/OVERALL: ours 1.150 < the better baseline 1.200"),
    (_row(report.OVERALL, "steady-s1.30", ours=1.3, **{"fixed split": 1.19}), "fixed split 1.190, TIDE's 1.210"),
])
def test_check_fails_each_target_on_its_own(row: report.Row, miss: str) -> None:
    (missed,) = report.check([row])
    assert miss in missed


def test_the_steady_rows_reproduce_tides_split_and_ours_lends() -> None:
    rows = {r.scenario: r.values for r in report.steady_rows(SHAPES[0], Routing.WEIGHTED)}
    assert rows["steady-s1.15"]["fixed split"] == pytest.approx(1.071, abs=0.001)
    assert rows["steady-s1.30"]["fixed split"] == pytest.approx(1.210, abs=0.001)
    assert rows["steady-s1.30"]["ours"] == pytest.approx(1.30)
    even = {r.scenario: r.values for r in report.steady_rows(SHAPES[0], Routing.EVEN)}
    assert even["steady-s1.30"]["ours"] == even["steady-s1.30"]["fixed split"]  # a plain Service: no lending
    assert even["steady-s1.30"]["all-inference"] < 0.25  # 3 replicas at the MI250 replica's rate


def test_lent_replicas_start_serve_drain_and_delay_a_job_by_the_rest_of_the_drain() -> None:
    lender = Lender(LendTiming(startup_s=240, drain_s=60))
    lender.decide(True, 0.0)
    lender.advance(100.0)
    assert (lender.state, lender.lent) == ("starting", True)
    lender.advance(240.0)
    assert lender.state == "serving"
    lender.decide(False, 300.0)
    assert lender.reclaim(320.0) == 40.0  # the drain began at 300
    lender.advance(360.0)
    assert lender.state == "kept"
    assert lender.reclaim(400.0) == 0.0
    lender.decide(True, 400.0)
    assert lender.reclaim(410.0) == 0.0  # a replica not yet Ready holds no request: gone at once


def test_without_the_training_verdict_a_bursty_scenario_misses_a_phase() -> None:
    """Lending alone, with every run the lifecycle wants (TIDE's rule): a run spans a burst where no draft
    pays, and the phase falls below 0.97 x all-inference; the operator's verdict holds it and meets it."""
    scenario, params = generate("bursty", 13), operator_params()
    kwargs = {"shapes": SHAPES[:1], "routings": (Routing.WEIGHTED,)}
    always = report.check(report.scenario_rows(scenario, params, always_train=True, **kwargs))
    assert any("/1:high:" in miss for miss in always), always
    assert report.check(report.scenario_rows(scenario, params, **kwargs)) == []
