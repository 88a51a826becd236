"""Issue 15, mechanism 2: the fleet switch's dwell on top of the per-batch-size table.

With adaptiveSpeculativeTokens the engine applies the policy's table at the true batch size every
step, g=0 where speculation does not pay, with no dwell. A fleet-wide switch that also follows the
load turned off at high load and needed minDwell to come back, so a short low-load burst after high
load never speculated although the table would have. The switch now judges the draft (does it pay
at some batch size of the table's range) and leaves the load to the table.
"""

from __future__ import annotations

from tests.unit.control.served_engine import Pass, run
from tide_operator.control import actions as act
from tide_operator.control.policy import PolicyParams

HIGH, LOW = 480.0, 8.0  # a draft with a = 0.6 loses at 480 at any g and wins clearly at 8
BURSTY = [(1200.0, 0.6, HIGH), (90.0, 0.6, LOW), (600.0, 0.6, HIGH), (90.0, 0.6, LOW), (300.0, 0.6, HIGH)]


def switches(passes: list[Pass]) -> list[bool]:
    return [a.enabled for p in passes for a in p.actions
            if isinstance(a, act.SetSpeculation) and a.reason not in ("SpeculativeTokensRetuned", "ProbingDraft")]


def test_a_short_low_load_burst_after_high_load_speculates() -> None:
    passes = run(BURSTY, PolicyParams(target_revision="rev-1", max_batch_size=512))
    bursts = [p for p in passes if p.batch_size == LOW]
    assert bursts
    assert all(p.speculative_tokens == 2 for p in bursts)  # the table's g at batch 8, from the burst's first step
    # At high load the table drafts nothing (once measured): the burst's speedup costs nothing there.
    settled = [p for p in passes if p.batch_size == HIGH and p.now >= 300.0]
    assert {p.speculative_tokens for p in settled} == {0}
    assert False not in switches(passes)  # the draft pays (at low batch sizes): the fleet switch stays on
    assert not any(a.reason == "ProbingDraft" for p in passes for a in p.actions)  # nothing to re-measure


def test_load_swings_do_not_move_the_fleet_switch() -> None:
    swings = [(240.0, 0.6, HIGH if i % 2 else LOW) for i in range(20)]
    passes = run(swings, PolicyParams(target_revision="rev-1", max_batch_size=512))
    assert switches(passes) == [True]  # measured once; the table follows the load
    assert all(p.speculative_tokens == 0 for p in passes if p.batch_size == HIGH and p.now >= 300.0)
    assert all(p.speculative_tokens > 0 for p in passes if p.batch_size == LOW)


def test_without_adaptive_tokens_the_switch_still_follows_the_load() -> None:
    """adaptiveSpeculativeTokens false: no table, K everywhere, so the switch is the only way to stop losing."""
    passes = run(BURSTY, PolicyParams(target_revision="rev-1", max_batch_size=512, adaptive_speculative_tokens=False))
    on_off = switches(passes)
    assert on_off[:2] == [True, False]
    assert on_off == [True, False] * (len(on_off) // 2)  # off at each high-load phase, after its dwell
    assert passes[-1].speculative_tokens == 0
