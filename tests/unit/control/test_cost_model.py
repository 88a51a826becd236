"""The cost model: TIDE Eq. 5, the profile's interpolation and the choice of g per batch band."""

from __future__ import annotations

import itertools
import math

import pytest

from tide_operator.control.cost_model import (
    DEFAULT_PROFILE,
    CostPoint,
    CostProfile,
    acceptance_rate_from_length,
    best_speculative_tokens,
    expected_acceptance_length,
    practical_speedup,
    tokens_for_batch_size,
    tokens_per_batch_size_table,
)

FLAT = CostProfile((CostPoint(1, 0.05, 1.0),))  # Leviathan's setting: c = 0.05, memory-bound verify


@pytest.mark.parametrize(
    ("a", "g", "expected"),
    [(0.5, 3, 1.875), (0.7, 3, 2.533), (0.9, 3, 3.439), (0.0, 3, 1.0), (1.0, 3, 4.0), (0.8, 0, 1.0)],
)
def test_expected_acceptance_length_matches_the_geometric_sum(a: float, g: int, expected: float) -> None:
    assert expected_acceptance_length(a, g) == pytest.approx(expected, abs=1e-3)
    assert expected_acceptance_length(a, g) == pytest.approx(sum(a**i for i in range(g + 1)))


def test_acceptance_length_is_continuous_as_the_rate_reaches_one() -> None:
    assert expected_acceptance_length(1 - 1e-9, 5) == pytest.approx(expected_acceptance_length(1.0, 5), rel=1e-6)


@pytest.mark.parametrize(("a", "g"), [(0.1, 1), (0.55, 3), (0.93, 5)])
def test_acceptance_rate_from_length_inverts_the_length(a: float, g: int) -> None:
    assert acceptance_rate_from_length(expected_acceptance_length(a, g), g) == pytest.approx(a, abs=1e-6)


@pytest.mark.parametrize(
    ("a", "beta", "expected"),  # the research digest's worked example (section 15), c = 0.05, g = 3
    [
        (0.5, 1.0, 1.63),
        (0.7, 1.0, 2.20),
        (0.9, 1.0, 2.99),
        (0.5, 1.3, 1.29),
        (0.7, 2.0, 1.18),
        (0.5, 2.0, 0.87),
    ],
)
def test_practical_speedup_reproduces_the_worked_example(a: float, beta: float, expected: float) -> None:
    profile = CostProfile((CostPoint(1, 0.05, beta),))
    assert practical_speedup(a, 3, 1, profile) == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize(("a", "c", "best_g"), [(0.8, 0.05, 8), (0.8, 0.2, 4)])
def test_best_g_matches_leviathans_optimum(a: float, c: float, best_g: int) -> None:
    profile = CostProfile((CostPoint(1, c, 1.0),), reference_speculative_tokens=3)
    assert best_speculative_tokens(a, 1, 12, profile)[0] == best_g


def test_profile_interpolates_linearly_in_log_batch_size_and_clamps() -> None:
    profile = CostProfile((CostPoint(1, 0.2, 1.0), CostPoint(16, 0.1, 2.0)))
    assert profile.draft_cost(4) == pytest.approx(0.15)  # log2(4) is half of log2(16)
    assert profile.verify_cost(4, 3) == pytest.approx(1.5)
    assert profile.draft_cost(0.2) == 0.2
    assert profile.draft_cost(math.nan) == 0.2
    assert profile.draft_cost(1000) == 0.1


@pytest.mark.parametrize(("g", "expected"), [(0, 1.0), (1, 1 + 1 / 3), (3, 2.0), (6, 3.0)])
def test_verify_cost_scales_with_g_and_never_exceeds_g_plus_one(g: int, expected: float) -> None:
    profile = CostProfile((CostPoint(1, 0.1, 2.0),))  # fully linear latency at the reference g = 3
    assert profile.verify_cost(1, g) == pytest.approx(min(expected, g + 1))


def test_default_profile_follows_the_papers_shape() -> None:
    sizes = [1, 4, 16, 64, 256]
    draft = [DEFAULT_PROFILE.draft_cost(b) for b in sizes]
    verify = [DEFAULT_PROFILE.verify_cost(b, 3) for b in sizes]
    assert draft == sorted(draft, reverse=True)  # c(b) = D0 / T(b) falls
    assert verify == sorted(verify)  # beta(b) rises
    assert verify[0] == pytest.approx(1.0, abs=0.02)
    assert all(v <= 4.0 for v in verify)


def test_from_spec_points_reads_permille_and_percent() -> None:
    profile = CostProfile.from_spec_points([(1, 200, 101), (64, 167, 150)])
    assert profile.points[1] == CostPoint(64, 0.167, 1.5)


@pytest.mark.parametrize(
    ("points", "field"),
    [
        ((), "points"),
        ((CostPoint(8, 0.1, 1.0), CostPoint(4, 0.1, 1.0)), "batch_size"),
    ],
)
def test_bad_profiles_name_the_field(points: tuple[CostPoint, ...], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        CostProfile(points)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"draft_cost": -1}, "draft_cost"),
        ({"verify_cost": 0.5}, "verify_cost"),
    ],
)
def test_bad_points_name_the_field(kwargs: dict, field: str) -> None:
    args = {"batch_size": 1, "draft_cost": 0.1, "verify_cost": 1.0} | kwargs
    with pytest.raises(ValueError, match=field):
        CostPoint(**args)


def test_table_bands_are_contiguous_inclusive_and_g_falls_with_batch_size() -> None:
    table = tokens_per_batch_size_table(0.7, 3, 512)
    assert table[0][0] == 1
    assert table[-1][1] == 512
    for (_, end, _), (start, _, _) in itertools.pairwise(table):
        assert start == end + 1
    ks = [k for _, _, k in table]
    assert ks == sorted(ks, reverse=True)
    assert ks[0] == 3
    assert all(0 <= k <= 3 for k in ks)
    for start, end, k in table:  # each band's K is the model's best g inside it
        for b in (start, end):
            assert best_speculative_tokens(0.7, b, 3)[0] == k


@pytest.mark.parametrize(("a", "min_speedup", "on_at_512"), [(0.4, 1.0, False), (0.95, 1.0, True), (0.7, 5.0, False)])
def test_table_turns_speculation_off_where_it_does_not_pay(a: float, min_speedup: float, on_at_512: bool) -> None:
    table = tokens_per_batch_size_table(a, 3, 512, min_speedup=min_speedup)
    assert (table[-1][2] > 0) == on_at_512
    assert (best_speculative_tokens(a, 512, 3)[1] > min_speedup) == on_at_512


@pytest.mark.parametrize(("b", "k"), [(1, 3), (10, 3), (11, 2), (100, 2), (101, 0), (900, 0), (0.2, 3)])
def test_tokens_for_batch_size_looks_up_the_band(b: float, k: int) -> None:
    assert tokens_for_batch_size([[1, 10, 3], [11, 100, 2], [101, 512, 0]], b) == k
