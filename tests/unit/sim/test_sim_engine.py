"""The scenario model and the simulated engine's accounting (no HTTP, a fake clock)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tide_vllm_sim.engine import SimEngine, SpecCounters, expected_length
from tide_vllm_sim.scenario import Scenario, load_scenario

SCENARIO = Scenario.model_validate({
    "acceptance": {"initial": {"general": 0.8, "korean": 0.3}, "*": {"*": 0.5}},
    "timeline": [{"at_s": 0, "domain": "general"}, {"at_s": 10, "domain": "korean", "background_running": 40}],
    "engine": {"step_seconds": 0.01, "batch_knee": 40, "background_max_tokens": 10},
})


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _engine(time: FakeTime, scenario: Scenario = SCENARIO, g: int = 3, version: str | None = "initial") -> SimEngine:
    return SimEngine(scenario, num_speculative_tokens=g, draft_version=version, clock=time.clock, sleep=time.sleep)


def test_acceptance_by_version_and_domain_with_wildcards() -> None:
    assert SCENARIO.acceptance_for("initial", "korean") == 0.3
    assert SCENARIO.acceptance_for("v9", "french") == 0.5  # "*" version, "*" domain
    assert SCENARIO.acceptance_for(None, "general") == 0.0
    assert Scenario().acceptance_for("initial", "general") == Scenario().default_acceptance


def test_a_candidate_named_by_the_operators_run_id_is_found_by_its_counter() -> None:
    table = Scenario(acceptance={"r1": {"general": 0.8}, "*": {"general": 0.3}})
    assert table.acceptance_for("3fa9c2d1-r1", "general") == 0.8  # <uid hash>-r1: the scenario's r1
    assert table.acceptance_for("3fa9c2d1-r2", "general") == 0.3
    assert table.acceptance_for("xyz-r1", "general") == 0.3  # not the operator's form


def test_timeline_picks_the_last_started_phase() -> None:
    assert SCENARIO.domain_at(0) == "general"
    assert SCENARIO.domain_at(9.9) == "general"
    assert SCENARIO.phase_at(10).background_running == 40
    assert Scenario().domain_at(100) == "general"


@pytest.mark.parametrize("bad", [
    {"acceptance": {"v1": {"general": 1.5}}},
    {"timeline": [{"at_s": 5}, {"at_s": 1}]},
    {"typo": 1},
])
def test_invalid_scenarios_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Scenario.model_validate(bad)


def test_load_scenario_from_yaml_with_seed_override(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("seed: 3\nacceptance: {v1: {general: 0.9}}\n")
    assert load_scenario(path).seed == 3
    assert load_scenario(path, seed=9).seed == 9
    assert load_scenario(None).acceptance == {}
    path.write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="YAML mapping"):
        load_scenario(path)


def test_spec_counters_converge_exactly_on_the_scenario() -> None:
    counters = SpecCounters()
    tokens = counters.advance(1000, 0.8, 3)
    drafts, draft_tokens, accepted, per_position = counters.exposed()
    assert (drafts, draft_tokens) == (1000, 3000)
    assert per_position == [800, 640, 512]
    assert accepted == 1952
    assert tokens == pytest.approx(1000 * expected_length(0.8, 3))


def test_a_request_moves_counters_by_the_domain_acceptance() -> None:
    time = FakeTime()
    engine = _engine(time)
    request_id, tokens, seconds = engine.complete(prompt_tokens=5, max_tokens=400, domain="korean")
    assert (request_id, tokens) == ("cmpl-sim-1", 400)
    drafts, _, _, per_position = engine.counters.spec.exposed()
    assert per_position[0] / drafts == pytest.approx(0.3, abs=0.01)
    assert engine.counters.generation_tokens == pytest.approx(400)
    assert engine.counters.success == {"length": 1}
    assert seconds == pytest.approx(drafts * 0.01 * (1 + 1 / 40) * 1.3, rel=0.02)  # batch 1, g = 3
    assert engine.running_real == 0


def test_timeline_domain_applies_when_the_request_names_none() -> None:
    time = FakeTime()
    engine = _engine(time)
    engine.complete(1, 300, None)
    drafts, _, _, per_position = engine.counters.spec.exposed()
    assert per_position[0] / drafts == pytest.approx(0.8, abs=0.01)


def test_speculation_off_moves_no_spec_counter_and_takes_one_token_per_step() -> None:
    time = FakeTime()
    engine = _engine(time)
    engine.speculation_enabled = False
    _, tokens, seconds = engine.complete(1, 50, "general")
    assert engine.counters.spec.exposed()[0] == 0
    assert tokens == 50
    assert seconds == pytest.approx(50 * 0.01 * (1 + 1 / 40))


def test_no_draft_means_no_speculation() -> None:
    engine = _engine(FakeTime(), version=None)
    assert engine.speculative_tokens() == 0


def test_background_load_sets_the_batch_and_finishes_virtual_requests() -> None:
    time = FakeTime()
    engine = _engine(time)
    assert engine.running_and_waiting() == (0, 0)
    time.now = 10.0
    assert engine.tick() == []  # the general phase had no background load
    assert engine.running_and_waiting() == (40, 0)
    time.now = 11.0
    finished = engine.tick()
    drafts, _, _, per_position = engine.counters.spec.exposed()
    step = 0.01 * (1 + 40 / 40) * 1.3
    assert drafts == pytest.approx(40 * 1.0 / step, abs=1)
    assert per_position[0] / drafts == pytest.approx(0.3, abs=0.01)  # the korean phase
    expected_finished = int(drafts * expected_length(0.3, 3) / 10)
    assert len(finished) == pytest.approx(expected_finished, abs=1)
    assert finished[0].request_id.startswith("bg-")
    assert finished[0].acceptance_rate == pytest.approx((0.3 + 0.09 + 0.027) / 3)


def test_requests_over_max_num_seqs_wait() -> None:
    time = FakeTime()
    engine = SimEngine(SCENARIO, num_speculative_tokens=3, draft_version="initial", max_num_seqs=30,
                       clock=time.clock)
    time.now = 20.0
    assert engine.running_and_waiting() == (30, 10)


def test_noise_is_deterministic_given_the_seed() -> None:
    noisy = SCENARIO.model_copy(update={"noise": 0.2, "seed": 5})
    a = [_engine(FakeTime(), noisy).acceptance("general", n) for n in range(1, 6)]
    b = [_engine(FakeTime(), noisy).acceptance("general", n) for n in range(1, 6)]
    other = [_engine(FakeTime(), noisy.model_copy(update={"seed": 6})).acceptance("general", n) for n in range(1, 6)]
    assert a == b
    assert a != other
    assert len(set(a)) == 5
    assert all(0 <= x <= 1 for x in a)


def test_a_tick_across_a_phase_start_counts_only_the_loaded_part() -> None:
    time = FakeTime()
    engine = _engine(time)
    time.now = 12.0
    engine.tick()  # 0..10 general without background, 10..12 korean with 40 running
    drafts = engine.counters.spec.exposed()[0]
    assert drafts == pytest.approx(40 * 2.0 / (0.01 * 2 * 1.3), abs=1)


def test_bands_set_g_by_the_running_batch_like_vllms_lookup() -> None:
    time = FakeTime()
    engine = _engine(time)
    engine.bands = [(1, 8, 3), (9, 32, 1), (64, 256, 0)]
    assert engine.speculative_tokens() == 3  # batch 0 counts as 1
    time.now = 10.0  # 40 running in the background: between bands, the previous band's K carries on
    assert engine.speculative_tokens() == 1
    engine.bands = [(1, 256, 5)]
    assert engine.speculative_tokens() == 3  # capped at the launch g
    engine.speculation_enabled = False
    assert engine.speculative_tokens() == 0
