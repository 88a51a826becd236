"""The policy benchmark can fail: its check on constructed tables, a broken policy, the hindsight bound."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench.policy_sim import generator, report  # noqa: E402
from bench.policy_sim.operator_driver import SPEC, OperatorPolicy, operator_params, sense  # noqa: E402
from bench.policy_sim.world import World  # noqa: E402


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("policy_bench", ROOT / "bench" / "policy_bench.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(scenario: str, phase: str, **values: float) -> report.Row:
    base = {"no-spec": 1.0, "static": 1.2, "tide-default": 1.1, "tide-adaptive": 1.25, "oracle": 1.3,
            "ours": 1.28, "bound": 1.4}
    return report.Row(scenario, phase, {**base, **values})


def test_check_passes_on_a_table_that_meets_every_target() -> None:
    rows = [_row("a", "p1", ours=1.177), _row("a", report.OVERALL, ours=1.26, oracle=1.3262)]
    assert report.check(rows) == []


ALL_BELOW = "ALL: ours 1.230 not above TIDE-adaptive 1.250"


@pytest.mark.parametrize(("rows", "misses"), [
    ([_row("a", "p1", ours=1.175), _row("a", report.OVERALL)], ["a/p1: ours 1.175 < 0.98 x max(no-spec, static)"]),
    ([_row("a", report.OVERALL, ours=1.23, oracle=1.28)], ["a: ours 1.230 < 0.99 x TIDE-adaptive", ALL_BELOW]),
    ([_row("a", report.OVERALL, ours=1.26, oracle=1.33)], ["a: ours 1.260 < 0.95 x informed oracle"]),
    ([_row("a", report.OVERALL, ours=1.25), _row("b", report.OVERALL, ours=1.24)],
     ["ALL: ours 1.245 not above TIDE-adaptive"]),
    ([_row("a", report.OVERALL, **{"tide-default": 1.41})], ["a/OVERALL: tide-default above the hindsight bound"]),
])
def test_check_fails_each_target_on_its_own(rows: list[report.Row], misses: list[str]) -> None:
    missed = report.check(rows)
    assert len(missed) == len(misses)
    assert all(m.startswith(want) for m, want in zip(missed, misses, strict=True))


def test_speculation_always_on_fails_the_check(bench, capsys: pytest.CaptureFixture[str]) -> None:
    """Speculation On at K=3 everywhere: at batch 160-480 it loses to no speculation; --check exits 1."""
    assert bench.main(["--check", "--speculation", "On", "--family", "long_high_load"]) == 1
    out = capsys.readouterr().out
    assert ":high: ours" in out
    assert "< 0.98 x max(no-spec, static)" in out


@pytest.mark.parametrize("first", [0, 50, 100, 150])
def test_hindsight_bound_is_never_beaten_at_any_step(first: int) -> None:
    """200 random scenarios (25 minutes each, 50 per test): no policy, ours included, above the bound at any step."""
    started, beaten = time.monotonic(), []
    for seed in range(first, first + 50):
        scenario = generator.random_scenario(seed, max_minutes=25)
        _, series = report.run_series(scenario)
        bound = series["bound"]
        for policy in report.POLICIES:
            over = [i for i, (v, u) in enumerate(zip(series[policy], bound, strict=True)) if v > u + 1e-9]
            if over:
                beaten.append(f"{scenario.name}: {policy} above the bound at steps {over[:5]}")
    assert beaten == []
    print(f"50 scenarios in {time.monotonic() - started:.0f}s")


def test_seed_sets_are_disjoint_and_cover_every_family() -> None:
    assert not set(generator.SEED_SETS["train"]) & set(generator.SEED_SETS["held-out"])
    held_out = generator.scenario_set("held-out")
    assert {s.family for s in held_out} == set(generator.FAMILIES)
    assert generator.scenario_set("held-out") == held_out  # a seed always makes the same scenario


def test_noise_is_paired_a_policy_alone_sees_what_it_sees_beside_the_others() -> None:
    scenario = generator.generate("domain_shifts", 11)
    alone = report.run_policy(World(scenario), OperatorPolicy(World(scenario)))
    world = World(scenario)
    report.run_policy(world, report.NoSpec(world))
    assert report.run_policy(world, OperatorPolicy(world)) == alone


def test_the_world_punishes_regression_forgetting_and_capture() -> None:
    scenario = generator.generate("recurring", 11)
    world = World(scenario)
    trained = world.trained(scenario.launch, (0.0, 1.0))
    assert trained[1] > scenario.launch[1]
    better = world.trained(trained, (0.0, 1.0))
    forgot = world.trained(world.trained(trained, (1.0, 0.0)), (0.0, 1.0))
    assert forgot[1] < better[1]  # a round on domain 0 cost domain 1 some of its gain
    k = int(next(i for i, r in enumerate(world.noise.regression) if r > 0))
    policy = OperatorPolicy(world)
    world.launch_training(policy.dep, "r1", k * generator.TICK_S)
    job = policy.dep.job
    assert job is not None
    assert job.candidate.live[0] < world.trained(scenario.launch, (1.0, 0.0))[0]  # worse live than trained
    off, on = OperatorPolicy(world), OperatorPolicy(world)
    on.dep.capture = True
    assert world.step(on.dep, 0) == pytest.approx(world.step(off.dep, 0) * (1 - scenario.world.capture_cost))


@pytest.mark.parametrize("seed", [11, 12, 1001])
def test_adapting_away_forgets_the_home_domain_below_the_launch_draft_but_no_other(seed: int) -> None:
    """bench/trainer_shift.py: a code draft adapted to prose lost acceptance on code. The launch draft
    learnt its home domain (0), so a draft adapted elsewhere can fall below it there; on a domain the
    launch draft never learnt it never falls below the launch level; a bad launch draft learnt nothing."""
    scenario = generator.generate("recurring", seed)
    drop = scenario.launch[0] - scenario.untrained[0]
    assert 0.13 <= drop <= 0.31
    assert scenario.untrained[1] == scenario.launch[1]
    world, draft = World(scenario), scenario.launch
    for _ in range(20):
        draft = world.trained(draft, (0.0, 1.0))
    assert scenario.untrained[0] <= draft[0] < scenario.launch[0] - drop / 2
    for _ in range(20):
        draft = world.trained(draft, (1.0, 0.0))
    assert draft[1] >= scenario.launch[1]
    bad = generator.generate("bad_launch", seed)
    assert bad.untrained == bad.launch


def test_cancelled_run_never_posts_a_result_and_the_canary_has_a_throughput() -> None:
    from tide_operator.control import actions as act

    scenario = generator.generate("steady", 11)
    world = World(scenario)
    policy = OperatorPolicy(world, operator_params(SPEC))
    world.launch_training(policy.dep, "r1", 0.0)
    policy.effects.cancel_training(act.CancelTraining("r1", "WorkloadShift", ""))
    for i in range(300):
        world.step(policy.dep, i)
    assert policy.dep.job is None
    assert "r1" not in policy.dep.finished
    policy.effects.start_canary(act.StartCanary("r1", 1, "CandidateBetter", "", ("pod-0",)))
    for i in range(300, 400):
        world.step(policy.dep, i)
    from dataclasses import replace

    from tide_operator.control.lifecycle import LifecycleState, Phase
    from tide_operator.control.policy import PolicyState
    state = PolicyState(lifecycle=replace(LifecycleState(), phase=Phase.CANARY, candidate="r1"))
    seen = sense(world, policy.dep, state, 400 * generator.STEP_S).observation
    assert seen is not None
    assert seen.canary is not None
    assert seen.control is not None
    assert seen.canary.generation_throughput is not None
    assert seen.control.generation_throughput is not None


def _pool_row(name: str, ours: float, tide: float, ours_h: float, tide_h: float) -> report.PoolRow:
    return report.PoolRow(name, {"tide-adaptive": tide, "ours-pool-off": ours, "ours": ours},
                          {"tide-adaptive": tide_h, "ours-pool-off": ours_h, "ours": ours_h})


@pytest.mark.parametrize(("rows", "misses"), [
    ([_pool_row("a", 1.30, 1.20, 1.0, 2.5), _pool_row("b", 1.20, 1.16, 1.0, 1.5)], []),
    ([_pool_row("a", 1.25, 1.20, 1.0, 2.5), _pool_row("b", 1.21, 1.16, 1.0, 1.5)], ["ours 1.230 < 1.05 x"]),
    ([_pool_row("a", 1.30, 1.20, 1.0, 2.5), _pool_row("b", 1.20, 1.16, 1.5, 1.5)], ["training GPU-hours"]),
])
def test_the_pool_check_fails_each_of_issue_16s_targets_on_its_own(rows, misses) -> None:
    missed = report.check_pool(rows)
    assert len(missed) == len(misses)
    assert all(m.startswith(want) for m, want in zip(missed, misses, strict=True))


def test_a_recall_scores_pooled_drafts_on_the_shift_and_costs_training_gpu_time() -> None:
    """The simulated evaluation: a draft trained on the new domain scores above the served one; while it
    runs it holds a training GPU; it changes no draft."""
    scenario = generator.generate("recurring_pool", 11)
    world = World(scenario)
    policy = OperatorPolicy(world)
    dep = policy.dep
    dep.versions["v1"] = report.Draft("v1", (scenario.launch[0], scenario.ceilings[1]))
    dep.buffer = [(0.0, 400.0, (0.0, 1.0))]  # captured since the shift: domain 1 only
    world.launch_recall(dep, "r1", 0.0, ("v1",), captured_since=0.0, min_samples=256)
    job = dep.job
    assert isinstance(job, report.RecallJob)
    assert job.scores["v1"] > job.served_length  # the launch draft is poor on domain 1
    steps = int(scenario.world.recall_s / generator.STEP_S)
    for i in range(steps):
        world.step(dep, i)
    assert dep.job is None
    assert dep.finished["r1"] is job
    assert dep.training_gpu_s == pytest.approx(scenario.world.recall_s)
    assert dep.pointer.name == "initial"


# ---- the launch draft in the pool (issue 16) ----------------------------------
def _promoted(policy: OperatorPolicy, t: float) -> None:
    """A trained candidate promoted at ``t``: the pointer leaves the launch draft for v1."""
    from tide_operator.control import actions as act

    scenario = policy.world.scenario
    policy.dep.versions["r1"] = report.Draft("r1", (scenario.launch[0] - 0.1, scenario.ceilings[1]))
    policy.effects.now = t
    policy.effects.promote(act.Promote("r1", "CanaryPassed", ""))


def test_the_launch_draft_enters_the_pool_at_the_first_pass_and_is_offered_once_it_does_not_serve() -> None:
    from tide_operator.control.policy import PolicyState

    world = World(generator.generate("recurring_pool", 11))
    policy = OperatorPolicy(world)
    assert policy.effects.pool.entries == ()
    policy.tick(0.0)
    assert [(e.version, e.signature, e.last_served_at) for e in policy.effects.pool.entries] == [("initial", None, 0.0)]
    assert sense(world, policy.dep, PolicyState(), 0.0, policy.effects.pool).observation.pool == ()  # it serves
    _promoted(policy, 600.0)
    policy.tick(630.0)  # note_served: v1 was recorded by the promotion, not again
    assert [(e.version, e.last_served_at) for e in policy.effects.pool.entries] == [("initial", 0.0), ("v1", 600.0)]
    seen = sense(world, policy.dep, PolicyState(), 630.0, policy.effects.pool).observation
    assert seen.pool == ("initial",)


def test_a_recalled_initial_serves_the_launch_draft_again_and_touches_the_pool() -> None:
    from tide_operator.control import actions as act
    from tide_operator.control.policy import PolicyState

    world = World(generator.generate("recurring_pool", 11))
    policy = OperatorPolicy(world)
    policy.tick(0.0)
    _promoted(policy, 600.0)
    policy.effects.now = 1200.0
    policy.effects.start_canary(act.StartCanary("initial", 1, "DraftRecalled", "", ("pod-0",), recalled=True))
    assert [p.draft.name for p in policy.dep.pods] == ["initial", "v1", "v1", "v1"]
    policy.effects.now = 1500.0
    policy.effects.promote(act.Promote("initial", "CanaryPassed", "", recalled=True))
    assert policy.dep.pointer is world.launch
    assert all(p.draft is world.launch for p in policy.dep.pods)
    assert policy.dep.promotions == 1  # no new vN: the pointer names the launch draft again
    assert [(e.version, e.last_served_at) for e in policy.effects.pool.entries] == [("v1", 600.0), ("initial", 1500.0)]
    seen = sense(world, policy.dep, PolicyState(), 1530.0, policy.effects.pool).observation
    assert seen.promoted_version == "initial"
    assert seen.pool == ("v1",)


# ---- the capture signatures the operator sees a return in (issue 16) ----------------------------------------
def test_the_worlds_domains_are_as_far_apart_as_code_and_prose_and_a_mix_lies_between() -> None:
    from bench.policy_sim.world import traffic_signature
    from tide_contracts.draft_pool import signature_distance
    from tide_operator.control.draft_return import TrafficSignatures, returned_to

    a, b = traffic_signature((1.0, 0.0), 64), traffic_signature((0.0, 1.0), 64)
    assert signature_distance(a, b) == pytest.approx(0.08, abs=0.005)  # the tiny target's code vs prose
    mixed = traffic_signature((0.5, 0.5), 64)
    assert signature_distance(mixed, a) == pytest.approx(signature_distance(mixed, b))
    assert returned_to(TrafficSignatures(a, served=b, pooled=(("v1", a),))) == "v1"
    assert returned_to(TrafficSignatures(mixed, served=b, pooled=(("v1", a),))) is None


def test_collecting_after_a_promotion_the_driver_shows_the_newest_captures_against_the_pool() -> None:
    """sense() as read_sensors: the window of the newest captures since the phase began, the served draft's
    training signature (a promoted draft keeps its candidate's), the pooled drafts' that have one."""
    from dataclasses import replace

    from bench.policy_sim.world import traffic_signature
    from tide_operator.control import actions as act
    from tide_operator.control.lifecycle import LifecycleState
    from tide_operator.control.lifecycle import Phase as LifecyclePhase
    from tide_operator.control.policy import PolicyState

    world = World(generator.generate("recurring_pool", 11))
    policy = OperatorPolicy(world)
    policy.tick(0.0)
    home, away = traffic_signature((1.0, 0.0), 2048), traffic_signature((0.0, 1.0), 2048)
    _promoted(policy, 600.0)
    policy.dep.versions["v1"] = replace(policy.dep.pointer, signature=home)
    policy.effects._record("v1")
    policy.dep.versions["r2"] = report.Draft("r2", world.scenario.launch, away)
    policy.effects.now = 1200.0
    policy.effects.promote(act.Promote("r2", "CanaryPassed", ""))
    assert policy.dep.pointer.name == "v2"
    policy.dep.buffer = [(1300.0 + i, 40.0, (1.0, 0.0)) for i in range(10)]  # back on domain 0
    after = LifecycleState(phase=LifecyclePhase.COLLECTING, phase_since=1250.0, last_promotion_at=1250.0)
    seen = sense(world, policy.dep, PolicyState(lifecycle=after), 1320.0, policy.effects.pool, 256).observation
    assert seen.traffic is not None
    assert seen.traffic.served == away
    assert [v for v, _ in seen.traffic.pooled] == ["v1"]  # the launch draft has no signature
    assert seen.traffic.window.tokens == 7 * 40 * 128  # the newest 280 requests: 256 or more
    training = replace(after, phase=LifecyclePhase.TRAINING)
    assert sense(world, policy.dep, PolicyState(lifecycle=training), 1320.0, policy.effects.pool, 256
                 ).observation.traffic is None
