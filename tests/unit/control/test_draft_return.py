"""A return of traffic to a pooled draft's domain, seen in the capture shards' signatures (issue 16): the window
of the newest captures, the return decision, and the lifecycle treating a return like a shift (the pool is
scored on the new traffic first, once per promotion)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.unit.control.lifecycle_cases import PARAMS, inputs, state
from tide_contracts.draft_pool import DomainSignature
from tide_contracts.registry import CaptureObject
from tide_contracts.signature import PROJECTION, domain_signature
from tide_operator.control import actions as act
from tide_operator.control.draft_return import TrafficSignatures, return_windows, returned_to, window_signature
from tide_operator.control.lifecycle import Phase, RecallParams, step_lifecycle

RECALL = replace(PARAMS, recall=RecallParams(sample_threshold=20))
HIDDEN = 32


def domain(center: float, seed: int, tokens: int = 400) -> DomainSignature:
    """Rows of one domain: hidden states around a domain's own direction (the centre), with noise."""
    rng = np.random.default_rng(seed)
    direction = np.random.default_rng(int(center * 1000)).standard_normal(3 * HIDDEN)
    sig = domain_signature([direction + 0.5 * rng.standard_normal((tokens, 3 * HIDDEN))], HIDDEN)
    assert sig is not None
    return sig


CODE, PROSE = domain(1.0, 1), domain(2.0, 2)
CODE_WINDOW, PROSE_WINDOW = domain(1.0, 11), domain(2.0, 12)


def test_the_newest_window_is_nearer_its_own_domain() -> None:
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=PROSE, pooled=(("v1", CODE),))) == "v1"
    assert returned_to(TrafficSignatures(PROSE_WINDOW, served=PROSE, pooled=(("v1", CODE),))) is None


def test_a_mixed_window_is_no_return() -> None:
    rng = np.random.default_rng(5)
    rows = [np.random.default_rng(int(c * 1000)).standard_normal(3 * HIDDEN) + 0.5 * rng.standard_normal(
        (200, 3 * HIDDEN)) for c in (1.0, 2.0)]
    mixed = domain_signature(rows, HIDDEN)
    assert mixed is not None
    assert returned_to(TrafficSignatures(mixed, served=PROSE, pooled=(("v1", CODE),))) is None


def test_two_drafts_of_one_domain_are_no_return() -> None:
    """An early and a later draft of the same traffic: their signatures are both near the window, a ratio
    between two small distances is noise."""
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=domain(1.0, 3), pooled=(("v1", CODE),))) is None


def test_nothing_to_compare_is_no_return() -> None:
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=None, pooled=(("v1", CODE),))) is None
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=PROSE, pooled=())) is None
    other = CODE.model_copy(update={"projection": "another-method"})
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=PROSE, pooled=(("v1", other),))) is None
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=other, pooled=(("v1", CODE),))) is None


def test_the_nearest_of_several_pooled_drafts() -> None:
    chat = domain(3.0, 4)
    traffic = TrafficSignatures(CODE_WINDOW, served=PROSE, pooled=(("v3", chat), ("v1", CODE)))
    assert returned_to(traffic) == "v1"


def capture(at: float, samples: int, signature: DomainSignature | None) -> CaptureObject:
    return CaptureObject(f"p/captures/{at}", 100, at, samples, signature)


def test_the_window_is_the_newest_captures_since_the_phase_began() -> None:
    old = [capture(10.0 + i, 10, PROSE) for i in range(5)]
    new = [capture(100.0 + i, 10, CODE) for i in range(3)]
    window = window_signature([*old, *new], since=50.0, min_samples=20)
    assert window is not None
    assert window.tokens == 2 * CODE.tokens  # the two newest, not all three
    assert window_signature([*old, *new], since=101.5, min_samples=20) is None  # 10 since then
    assert window_signature(old, since=50.0, min_samples=1) is None


def test_a_window_mostly_without_signatures_says_nothing() -> None:
    unsigned = [capture(100.0 + i, 10, None) for i in range(3)]
    assert window_signature([*unsigned, capture(110.0, 10, CODE)], since=0.0, min_samples=40) is None
    assert window_signature([capture(99.0, 10, CODE), capture(100.0, 40, CODE), capture(101.0, 5, None)],
                            since=0.0, min_samples=50) is not None  # 5 of 55 unsigned


def test_a_window_of_two_projections_says_nothing() -> None:
    other = CODE.model_copy(update={"projection": "another-method"})
    assert window_signature([capture(100.0, 10, CODE), capture(101.0, 10, other)], 0.0, 20) is None
    assert CODE.projection == PROJECTION


# ---- the lifecycle --------------------------------------------------------------------------------------------
PROMOTED_AT = 2000.0


def collecting_after_promotion(**kwargs: object):
    """Collecting for the next round after a promotion that followed the shift at 1000 (pool tried for it)."""
    fields = {"shift_at": 1000.0, "recalled_for_shift": 1000.0, "last_promotion_at": PROMOTED_AT,
              "phase_since": PROMOTED_AT, "buffer_baseline": 0} | kwargs
    phase = fields.pop("phase", Phase.COLLECTING)
    return state(phase, **fields)  # type: ignore[arg-type]


def test_a_return_restarts_collection_and_scores_the_pool_first() -> None:
    returned = step_lifecycle(collecting_after_promotion(), inputs(buffer_samples=60, pool=("v1", "initial"),
                                                                  returned_to="v1"), RECALL, 2500.0)
    assert (returned.state.phase, returned.reason) == (Phase.COLLECTING, "TrafficReturned")
    assert "v1" in returned.message
    assert (returned.state.shift_at, returned.state.buffer_baseline) == (2500.0, 60)
    assert returned.state.capture_enabled
    # The old round's samples are stale: the pool is scored on samples of the returned traffic only.
    waiting = step_lifecycle(returned.state, inputs(buffer_samples=70, pool=("v1", "initial")), RECALL, 2510.0)
    assert not any(isinstance(a, act.LaunchRecall) for a in waiting.actions)
    scored = step_lifecycle(waiting.state, inputs(buffer_samples=80, pool=("v1", "initial")), RECALL, 2520.0)
    (launch,) = [a for a in scored.actions if isinstance(a, act.LaunchRecall)]
    assert (launch.captured_since, scored.state.phase) == (2500.0, Phase.RECALLING)


def test_only_collecting_sees_a_return() -> None:
    """Capture runs only while Collecting (and Recalling, which scores the pool already)."""
    training = collecting_after_promotion(phase=Phase.TRAINING, active_run="r4")
    kept = step_lifecycle(training, inputs(buffer_samples=60, pool=("v1",), returned_to="v1"), RECALL, 2500.0)
    assert kept.reason != "TrafficReturned"


@pytest.mark.parametrize("lifecycle", [
    collecting_after_promotion(last_promotion_at=None),  # nothing promoted yet: the launch draft's first round
    collecting_after_promotion(last_promotion_at=900.0),  # promoted before the shift: its recall is pending
    collecting_after_promotion(shift_at=2600.0),  # a return was already tried since the promotion
    collecting_after_promotion(recall_only=True),  # a rise is being scored already
    collecting_after_promotion(phase=Phase.RECALLING, recall_run="r5"),
])
def test_the_served_draft_is_the_reference_once_per_promotion(lifecycle) -> None:
    """Only a next round after a promotion since the last shift compares with the served draft's traffic;
    any other round needs two windows of its own, and compares its newest with its first."""
    one_window = [capture(2650.0 + i, 10, CODE) for i in range(2)]
    assert return_windows(lifecycle, one_window, 20) is None
    two_windows = [capture(2640.0 + i, 10, PROSE) for i in range(2)] + one_window
    windows = return_windows(lifecycle, [*two_windows, capture(2660.0, 10, CODE)], 20)
    assert windows is not None
    assert not windows.against_served
    assert windows.round_start is not None
    assert windows.round_start.mean == pytest.approx(PROSE.mean)
    assert windows.newest.mean == pytest.approx(CODE.mean)


def test_a_next_round_compares_with_the_served_draft_at_once() -> None:
    windows = return_windows(collecting_after_promotion(), [capture(2100.0 + i, 10, CODE) for i in range(2)], 20)
    assert windows is not None
    assert (windows.against_served, windows.round_start) == (True, None)


def test_no_window_where_nothing_is_captured() -> None:
    captures = [capture(2100.0 + i, 10, CODE) for i in range(8)]
    for phase in (Phase.SERVING, Phase.TRAINING, Phase.EVALUATING, Phase.CANARY):
        assert return_windows(collecting_after_promotion(phase=phase), captures, 20) is None
    assert return_windows(state(Phase.COLLECTING), captures, 20) is None  # no shift yet: the first round


def test_within_a_round_the_window_is_judged_against_its_start() -> None:
    """The round began on prose (the served draft, adapted to it or not, has no say): code came back."""
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=None, pooled=(("v1", CODE),),
                                         round_start=PROSE)) == "v1"
    assert returned_to(TrafficSignatures(PROSE_WINDOW, served=None, pooled=(("v1", CODE),),
                                         round_start=PROSE)) is None
    assert returned_to(TrafficSignatures(CODE_WINDOW, served=None, pooled=(("v1", CODE),),
                                         round_start=domain(1.0, 13))) is None  # the round began on code


def test_a_return_during_the_pools_evaluation_cancels_it_and_scores_the_new_traffic() -> None:
    """A whole-loop CI run: the evaluation scored the pool on prose while code came back; the pool lost,
    and the next round trained on both. The evaluation is stale: it is cancelled and the pool tried again."""
    recalling = state(Phase.RECALLING, shift_at=2600.0, recalled_for_shift=2600.0, recall_run="r5",
                      run_counter=5, buffer_baseline=0)
    step = step_lifecycle(recalling, inputs(buffer_samples=140, pool=("v1", "initial"), returned_to="v1"),
                          RECALL, 2700.0)
    assert (step.state.phase, step.reason, step.state.shift_at) == (Phase.COLLECTING, "TrafficReturned", 2700.0)
    assert [a.run_id for a in step.actions if isinstance(a, act.CancelTraining)] == ["r5"]
    assert (step.state.recall_run, step.state.buffer_baseline) == (None, 140)
    again = step_lifecycle(step.state, inputs(buffer_samples=160, pool=("v1", "initial")), RECALL, 2710.0)
    (launch,) = [a for a in again.actions if isinstance(a, act.LaunchRecall)]
    assert launch.captured_since == 2700.0


@pytest.mark.parametrize(("pool", "params"), [
    ((), RECALL),  # the draft it returned to left the pool
    (("v2",), RECALL),
    (("v1",), replace(RECALL, recall=RecallParams(enabled=False))),
])
def test_no_return_without_the_draft_in_the_pool_or_with_recall_off(pool, params) -> None:
    step = step_lifecycle(collecting_after_promotion(), inputs(buffer_samples=60, pool=pool, returned_to="v1"),
                          params, 2500.0)
    assert step.reason != "TrafficReturned"
