"""A measured cost profile: sweep measurements -> cost points -> the profile the operator uses."""

from __future__ import annotations

import json

import pytest

from tide_operator.adapters.cost_profile_source import parse_profile
from tide_operator.control.calibration import (
    Sweep,
    SweepPoint,
    cost_points,
    predicted_speedup,
    profile_from_spec_points,
    spec_points,
    sweep_from_json,
    sweep_to_json,
)

G = 3
TOKENS = 64  # per request


def synthetic_sweep(t0: float, k: float, draft_s: float, length: float, sizes=(1, 2, 4, 8, 16)) -> Sweep:
    """What an engine with T(n) = t0 + k n and a draft step of draft_s seconds would measure."""
    points = []
    for b in sizes:
        target = t0 + k * b
        points.append(SweepPoint(b, False, b * TOKENS, TOKENS * target))
        spec_step = G * draft_s + t0 + k * b * (G + 1)
        drafts = b * TOKENS / length
        points.append(SweepPoint(b, True, b * TOKENS, TOKENS / length * spec_step, drafts, drafts * G,
                                 drafts * (length - 1)))
    return Sweep(tuple(points), G)


def test_an_affine_engine_gives_back_its_draft_and_verify_costs() -> None:
    sweep = synthetic_sweep(t0=0.010, k=0.001, draft_s=0.002, length=2.5)
    for point in cost_points(sweep):
        target = 0.010 + 0.001 * point.batch_size
        assert point.draft_cost == pytest.approx(0.002 / target)
        assert point.verify_cost == pytest.approx((0.010 + 0.001 * point.batch_size * 4) / target)


def test_the_calibrated_model_predicts_the_measured_speedup() -> None:
    sweep = synthetic_sweep(t0=0.010, k=0.002, draft_s=0.003, length=3.1)
    profile = profile_from_spec_points(spec_points(cost_points(sweep)))
    for b in sweep.concurrencies():
        # the spec's integer units round c to 0.001 and beta to 0.01: a fraction of a percent
        assert predicted_speedup(sweep, b, profile) == pytest.approx(sweep.measured_speedup(b), rel=0.01)


def test_a_speculative_step_cheaper_than_the_fitted_verify_puts_it_all_in_verify() -> None:
    # measured s(b) below the affine fit's beta: c cannot go negative, beta takes the whole of s
    sweep = synthetic_sweep(t0=0.010, k=0.002, draft_s=0.0, length=2.0, sizes=(1, 16))
    fast = SweepPoint(16, True, 16 * TOKENS, TOKENS / 2.0 * 0.060, 16 * TOKENS / 2.0, 0.0, 16 * TOKENS / 2.0)
    sweep = Sweep((*[p for p in sweep.points if (p.concurrency, p.speculation) != (16, True)], fast), G)
    point = cost_points(sweep)[-1]
    assert point.draft_cost == 0.0
    assert point.verify_cost == pytest.approx(0.060 / (0.010 + 0.002 * 16))


def test_the_document_is_within_the_spec_bounds_and_parses() -> None:
    sweep = synthetic_sweep(t0=0.001, k=0.0, draft_s=0.5, length=1.5)  # c(b) = 500: above the spec's 100
    points = spec_points(cost_points(sweep))
    assert all(p["draftCostPermille"] == 100_000 and p["verifyCostPercent"] == 100 for p in points)
    parsed = parse_profile(json.dumps({"points": points}))
    assert [size for size, _, _ in parsed] == [1, 2, 4, 8, 16]


def test_speculation_on_without_drafts_is_not_a_measurement() -> None:
    with pytest.raises(ValueError, match="nothing was drafted"):
        SweepPoint(4, True, 256, 1.0)


def test_only_concurrencies_measured_both_ways_are_calibrated() -> None:
    sweep = synthetic_sweep(0.01, 0.001, 0.002, 2.0)
    partial = Sweep(tuple(p for p in sweep.points if (p.concurrency, p.speculation) != (8, True)), G)
    assert [p.batch_size for p in cost_points(partial)] == [1, 2, 4, 16]


def test_the_measurement_json_round_trips() -> None:
    sweep = synthetic_sweep(0.01, 0.001, 0.002, 2.0)
    assert sweep_from_json(json.loads(json.dumps(sweep_to_json(sweep)))) == sweep
