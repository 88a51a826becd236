"""The calibration bench's check on constructed sweeps (the real-engine run is bench/calibration_bench.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tide_operator.control.calibration import Sweep, SweepPoint

_SPEC = importlib.util.spec_from_file_location(
    "calibration_bench", Path(__file__).resolve().parents[3] / "bench" / "calibration_bench.py")
assert _SPEC is not None
assert _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def sweep(spec_step_s: float) -> Sweep:
    """Target step 10 ms at every batch size; a speculative step of spec_step_s; 2 tokens per step."""
    points = []
    for b in (1, 2, 4, 8, 16):
        points.append(SweepPoint(b, False, b * 64, 64 * 0.010))
        points.append(SweepPoint(b, True, b * 64, 32 * spec_step_s, b * 32, b * 96, b * 32))
    return Sweep(tuple(points), 3)


def test_a_held_out_sweep_like_the_calibration_passes() -> None:
    _, profile = bench.calibrate(sweep(0.015))
    table = bench.rows(sweep(0.015), profile)
    assert [round(r["measured"], 3) for r in table] == [round(2 * 0.010 / 0.015, 3)] * 5
    assert bench.misses(table) == []


def test_a_held_out_sweep_20_percent_slower_is_a_miss() -> None:
    _, profile = bench.calibrate(sweep(0.015))
    table = bench.rows(sweep(0.018), profile, sweep(0.015))
    assert len(bench.misses(table)) == 5
    assert [round(r["spread"], 3) for r in table] == [0.2] * 5  # the sweeps differ as much as the model misses
    text = bench.render(table, [])
    assert "worst calibrated error 19.9% (target 15%)" in text  # 20% less the spec units' rounding
    assert "held-out one, worst 20.0%" in text
