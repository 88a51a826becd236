"""The pool-signature benchmark's pure helpers: the mixed truth, window slices and the judgement of a pick.

The experiment itself (captures, training, the table) is bench/draft_pool_signature.py, run by hand.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "draft_pool_signature", Path(__file__).resolve().parents[3] / "bench" / "draft_pool_signature.py")
assert _SPEC is not None
assert _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = bench  # dataclasses look their module up there
_SPEC.loader.exec_module(bench)


def test_a_mixture_mixes_the_sums_not_the_acceptance_lengths() -> None:
    a = bench.Tally(accepted=300.0, rounds=100, requests=10)  # 4.0 per round, 10 rounds per request
    b = bench.Tally(accepted=100.0, rounds=300, requests=10)  # 1/3 per round, 30 rounds per request
    assert bench.mixed_acceptance(a, b, 1.0) == pytest.approx(4.0)
    assert bench.mixed_acceptance(a, b, 0.0) == pytest.approx(1 + 1 / 3)
    # half and half: (15 + 5) accepted over (5 + 15) rounds per request, not the mean of 4 and 4/3
    assert bench.mixed_acceptance(a, b, 0.5) == pytest.approx(2.0)


def test_a_window_slice_takes_the_share_from_each_pool_without_repeats() -> None:
    pool_a, pool_b = [f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]
    picked = bench.window_slice(pool_a, pool_b, 0.8, 5, random.Random(1))
    assert sum(p.startswith("a") for p in picked) == 4
    assert sum(p.startswith("b") for p in picked) == 1
    assert len(set(picked)) == 5
    assert bench.window_slice(pool_a, pool_b, 0.8, 5, random.Random(1)) == picked  # seeded


def test_spearman_is_one_for_the_same_order_minus_one_reversed_and_averages_ties() -> None:
    assert bench.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert bench.ranks([5.0, 1.0, 5.0]) == [2.5, 1.0, 2.5]
    assert bench.spearman([1, 1, 1], [1, 2, 3]) == 0.0


def test_judge_scores_the_pick_against_the_truth() -> None:
    truth = {"code": 2.0, "prose": 1.5, "mix": 1.9}
    right = bench.judge({"code": -0.1, "prose": -3.0, "mix": -0.5}, truth)  # distances, negated
    assert (right.picked, right.best, right.hit, right.regret) == ("code", "code", True, 0.0)
    assert right.rho == pytest.approx(1.0)
    wrong = bench.judge({"code": 1.2, "prose": 1.0, "mix": 1.3}, truth)
    assert (wrong.picked, wrong.hit) == ("mix", False)
    assert wrong.regret == pytest.approx(0.1)
    assert wrong.rho == pytest.approx(0.5)


def test_summary_averages_hits_regret_and_cost() -> None:
    judged = [bench.Judgement("a", "a", True, 0.0, 1.0), bench.Judgement("b", "a", False, 0.2, 0.0)]
    row = bench.summary(judged, [0.001, 0.003])
    assert row == pytest.approx({"accuracy": 0.5, "mean_regret": 0.1, "max_regret": 0.2,
                                 "mean_spearman": 0.5, "ms_per_decision": 2.0})


def test_the_shortlist_evaluates_only_the_nearest_and_ranks_the_rest_last() -> None:
    signature = {"code": -0.1, "prose": -2.0, "mix": -0.4}
    evaluation = {"code": 1.8, "prose": 2.5, "mix": 1.9}
    short = bench.shortlisted(signature, evaluation, keep=2)
    assert short == {"code": 1.8, "mix": 1.9, "prose": float("-inf")}
    assert bench.judge(short, {"code": 1.8, "prose": 2.5, "mix": 1.9}).picked == "mix"
