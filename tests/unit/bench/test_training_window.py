"""The simulated trainer reads the window production claims: since the shift when the action says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench.policy_sim import generator  # noqa: E402
from bench.policy_sim.operator_driver import OperatorPolicy  # noqa: E402
from bench.policy_sim.world import World, buffer_shares, claimed  # noqa: E402
from tide_operator.control import actions as act  # noqa: E402


def _mixed_buffer(policy: OperatorPolicy, samples: float) -> float:
    """Five minutes of domain 0, then five of domain 1, ``samples`` per step; returns when domain 1 began."""
    for i in range(60):
        policy.dep.buffer.append((i * generator.STEP_S, samples, (1.0, 0.0)))
    for i in range(60, 120):
        policy.dep.buffer.append((i * generator.STEP_S, samples, (0.0, 1.0)))
    return 60 * generator.STEP_S


def test_a_run_launched_after_a_shift_trains_on_the_new_domain_only() -> None:
    world = World(generator.generate("recurring", 11))
    mixed, shifted = OperatorPolicy(world), OperatorPolicy(world)
    shift_at = _mixed_buffer(mixed, 40.0)  # 2400 samples of each domain: the shift's alone reach 2048
    _mixed_buffer(shifted, 40.0)
    now = 120 * generator.STEP_S
    mixed.effects.now = shifted.effects.now = now
    mixed.effects.launch_training(act.LaunchTraining("r1", "SampleThresholdReached", ""))
    shifted.effects.launch_training(act.LaunchTraining("r1", "SampleThresholdReached", "", captured_since=shift_at))
    assert mixed.dep.job is not None
    assert shifted.dep.job is not None
    regression = world.noise.regression[int(now // generator.TICK_S)]
    # Without a shift time the run reads the whole buffer, half of each domain (as before)...
    assert mixed.dep.job.candidate.live[1] == pytest.approx(
        world.trained(world.launch.live, (0.5, 0.5))[1] - regression * 0.5)
    # ...with it, domain 1 alone, and gains more there than the run trained on the mix.
    assert shifted.dep.job.candidate.live[1] == pytest.approx(
        world.trained(world.launch.live, (0.0, 1.0))[1] - regression)
    assert shifted.dep.job.candidate.live[1] > mixed.dep.job.candidate.live[1]


def test_the_sim_claims_the_window_production_claims_topped_up_to_the_sample_threshold() -> None:
    world = World(generator.generate("recurring", 11))
    policy = OperatorPolicy(world)
    _mixed_buffer(policy, 20.0)
    now = 120 * generator.STEP_S
    # No shift: every entry (production: the newest window_shards within retention).
    assert len(claimed(policy.dep.buffer, now, None, 2048)) == 120
    # Since domain 1 began: its 60 entries (1200 samples) only, when that is enough...
    since = claimed(policy.dep.buffer, now, 300.0, 1000)
    assert buffer_shares(since, 2) == pytest.approx((0.0, 1.0))
    # ...and topped up with the newest older entries to sampleThreshold when not: 2048 samples = 103 entries.
    topped = claimed(policy.dep.buffer, now, 300.0, 2048)
    assert len(topped) == 103
    assert buffer_shares(topped, 2) == pytest.approx((43 / 103, 60 / 103))
    # The operator's run reads that window: SimEffects hands the action's time and the spec's threshold on.
    policy.effects.now = now
    policy.effects.launch_training(act.LaunchTraining("r1", "SampleThresholdReached", "", captured_since=300.0))
    assert policy.dep.job is not None
    k = int(now // generator.TICK_S)
    expected = world.trained(world.launch.live, (43 / 103, 60 / 103))[1] - world.noise.regression[k] * 60 / 103
    assert policy.dep.job.candidate.live[1] == pytest.approx(expected)
