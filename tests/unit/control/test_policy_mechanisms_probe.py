"""Issue 15, mechanism 1: once speculation is off, the served draft was never measured again.

The acceptance estimate kept the bad domain's value, the drift detector was frozen, and speculation
stayed off after the traffic returned to where the draft is good. A probe now re-measures the served
draft for one rate window after a silence that starts at probeInterval / 8 and doubles up to
probeInterval, where that is cheap (probe.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.control.served_engine import Pass, ServedEngine, run
from tide_operator.control import actions as act
from tide_operator.control.cost_model import practical_speedup
from tide_operator.control.policy import PolicyParams, PolicyState, decide
from tide_operator.control.probe import REASON_PROBING
from tide_operator.control.speculation import DecisionParams

PARAMS = PolicyParams(target_revision="rev-1", max_batch_size=512)  # probeInterval 10m, a 60 s rate window
GOOD, BAD = 0.7, 0.1  # the draft wins at a = 0.7 and loses at every batch size at a = 0.1
RETURN_S = 2400.0
TRAFFIC = [(1200.0, GOOD, 16.0), (1200.0, BAD, 16.0), (2400.0, GOOD, 16.0)]


def probes(passes: list[Pass]) -> list[float]:
    return [p.now for p in passes for a in p.actions
            if isinstance(a, act.SetSpeculation) and a.reason == REASON_PROBING]


def test_speculation_resumes_after_the_traffic_returns_to_where_the_draft_is_good() -> None:
    passes = run(TRAFFIC, PARAMS)
    bad = [p for p in passes if 1200.0 <= p.now < RETURN_S]
    assert not bad[-1].state.speculation.enabled  # the bad domain switched it off
    back = next(p.now for p in passes if p.now >= RETURN_S and p.speculative_tokens > 0)
    assert back - RETURN_S <= PARAMS.decision.probe_interval_s + PARAMS.observation_window_s + 60.0
    assert all(p.speculative_tokens > 0 for p in passes if p.now > back)
    assert passes[-1].state.acceptance_estimate == pytest.approx(GOOD)


def test_a_probe_in_the_bad_domain_measures_and_ends_at_once() -> None:
    passes = run(TRAFFIC, PARAMS)
    off_at = next(p.now for p in passes if p.now >= 1200.0 and not p.state.speculation.enabled)
    started = [t for t in probes(passes) if t < RETURN_S]
    assert started
    interval = PARAMS.decision.probe_interval_s
    for n, t in enumerate(started):  # silent before each probe: interval / 8, doubling, up to interval
        last_drafted = max(p.now for p in passes if p.now < t and p.speculative_tokens > 0)
        assert t - last_drafted >= interval / 2 ** max(0, 3 - n)
    assert len(started) >= 3  # 20 minutes of the bad domain: 75 s, 150 s, 300 s, 600 s of silence
    drafted = [p for p in passes if off_at < p.now <= RETURN_S and p.speculative_tokens > 0]
    assert len(drafted) <= len(started) * 2  # one window at most each (two 30 s passes of 60 s)
    # The probe fed the detector: its short average saw the bad domain again.
    after_probe = next(p for p in passes if p.now > started[0] and p.speculative_tokens > 0)
    assert after_probe.state.drift.updated_at == after_probe.now
    assert after_probe.state.acceptance_estimate == pytest.approx(BAD)


def test_a_probe_at_high_load_would_cost_too_much_and_waits_for_lower_load() -> None:
    traffic = [(1200.0, GOOD, 16.0), (600.0, BAD, 16.0), (2400.0, BAD, 480.0), (900.0, GOOD, 16.0)]
    passes = run(traffic, PARAMS)
    assert not next(p for p in passes if p.now == 1800.0).state.speculation.enabled
    assert [t for t in probes(passes) if 1800.0 <= t < 4200.0] == []
    # Silent for longer than probeInterval: the first pass at a low batch size probes.
    back = next(p.now for p in passes if p.now >= 4200.0 and p.speculative_tokens > 0)
    assert back - 4200.0 <= PARAMS.observation_window_s + 30.0
    assert passes[-1].speculative_tokens > 0
    assert passes[-1].state.acceptance_estimate == pytest.approx(GOOD)


def test_the_probe_table_speculates_at_g1_where_the_estimate_alone_would_not() -> None:
    passes = run(TRAFFIC, PARAMS)
    start = next(a for p in passes for a in p.actions
                 if isinstance(a, act.SetSpeculation) and a.reason == REASON_PROBING)
    assert start.enabled
    assert start.tokens_per_batch_size is not None
    bands = {(first, last): k for first, last, k in start.tokens_per_batch_size}
    k16 = next(k for (first, last), k in bands.items() if first <= 16 <= last)
    assert k16 == 1  # the cheapest g that measures: the last estimate (0.1) loses at any g
    assert bands[max(bands)] == 0  # where the draft never paid even at its best, a probe costs and learns nothing
    assert practical_speedup(BAD, 1, 16.0) > 0.85  # what one window of this probe costs at most, modelled


def test_probe_interval_zero_keeps_speculation_off() -> None:
    params = PolicyParams(target_revision="rev-1", max_batch_size=512, decision=DecisionParams(probe_interval_s=0))
    passes = run(TRAFFIC, params)
    assert probes(passes) == []
    assert passes[-1].speculative_tokens == 0


def test_a_probe_survives_an_operator_restart() -> None:
    """The probe's state is plain data in status: a restart in the middle of a probe changes nothing."""
    plain = run(TRAFFIC, PARAMS)
    engine, state, restarted = ServedEngine(), PolicyState(), []
    for p in plain:
        observation = engine.observe(GOOD if p.now < 1200.0 or p.now >= RETURN_S else BAD, 16.0, p.now, 60.0)
        state = PolicyState.from_dict(json.loads(json.dumps(state.to_dict())))
        actions, state = decide(observation, state, PARAMS, p.now)
        engine.apply(actions)
        restarted.append(tuple(actions))
    assert restarted == [p.actions for p in plain]


def test_the_probe_clock_starts_when_the_pods_stop_drafting_not_when_the_window_empties() -> None:
    """A 5-minute excursion with a 5-minute rate window: after the table goes to g=0 the window still
    shows the old drafting for a whole window; the draft is unmeasured from when drafting stopped."""
    params = PolicyParams(target_revision="rev-1", max_batch_size=512, observation_window_s=300.0)
    passes = run([(1200.0, GOOD, 16.0), (300.0, BAD, 16.0), (2400.0, GOOD, 16.0)], params)
    stopped = next(p.now for p in passes if p.now >= 1200.0 and p.speculative_tokens == 0)
    first_probe = min(probes(passes))
    assert first_probe - stopped <= params.decision.probe_interval_s + 30.0
    assert passes[-1].speculative_tokens > 0


def test_after_a_short_excursion_speculation_resumes_well_before_a_whole_probe_interval() -> None:
    """A 5-minute excursion to a domain the draft does not know, then home: the probes' back-off
    (probeInterval / 8 first) finds the draft good again within about a quarter of probeInterval of the
    return; a fixed probeInterval left home traffic unspeculated for up to 10 minutes."""
    passes = run([(1200.0, GOOD, 16.0), (300.0, BAD, 16.0), (2400.0, GOOD, 16.0)], PARAMS)
    assert any(1200.0 <= p.now < 1500.0 and p.speculative_tokens == 0 for p in passes)  # it stopped away
    back = next(p.now for p in passes if p.now >= 1500.0 and p.speculative_tokens > 0)
    assert back - 1500.0 <= PARAMS.decision.probe_interval_s / 4 + PARAMS.observation_window_s + 30.0
    assert all(p.speculative_tokens > 0 for p in passes if p.now > back + PARAMS.observation_window_s)


def test_a_noisy_window_is_not_the_drafts_best_and_starts_no_probe_where_it_never_paid() -> None:
    """The draft's best acceptance decides where a probe drafts. Taken from the raw windows it was the
    luckiest one (noise of about 3% per query): at a high load where the true acceptance never paid, the
    probe drafted at g=1 every probeInterval and lost throughput for nothing. It is the detector's short
    average now."""
    a, high = 0.65, 384.0  # at batch 384 a = 0.65 does not pay at any g; 0.69 would pay at g=1
    assert practical_speedup(a, 1, high) < PARAMS.decision.off_threshold < practical_speedup(0.69, 1, high)
    noise = np.random.default_rng(3).normal(0.0, 0.03, 40)  # the luckiest window reads 0.715
    traffic = [(30.0, a * (1 + eps), 16.0) for eps in noise] + [(2400.0, a, high)]
    passes = run(traffic, PARAMS)
    assert any(p.speculative_tokens > 0 for p in passes if p.batch_size == 16.0)
    assert not [p.now for p in passes if p.batch_size == high and p.speculative_tokens > 0]
    assert not [t for t in probes(passes) if t >= 1200.0]
