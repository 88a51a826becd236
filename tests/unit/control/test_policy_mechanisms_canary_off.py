"""A canary while the fleet's speculation switch is off (issue 15, the largest cause of missed targets
in the policy bench after mechanisms 1-5).

The served draft does not pay at the current acceptance (a bad domain shift, a bad launch draft), so
the switch is off; a candidate trained for the new traffic is better. The canary pods used to follow
the fleet's switch: they did not speculate, measured no acceptance, every such canary ended
Inconclusive and counted as a rollback, and after two collection stopped. Now the canary pods
speculate with the candidate on their own and the canary is judged like a first draft against the
control pods, which do not speculate.

The pods here behave as production's effects and convergence make them: a pod speculates when the
fleet does (SetSpeculation), or when it is a canary pod the policy asked to speculate on its own
(StartCanary.speculate, kept while the canary runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tide_operator.control import actions as act
from tide_operator.control.canary import PodGroupMetrics
from tide_operator.control.cost_model import expected_acceptance_length, practical_speedup
from tide_operator.control.lifecycle import LifecycleState, Phase
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide
from tide_operator.control.probe import ProbeState
from tide_operator.control.speculation import SpeculationState

PARAMS = PolicyParams(target_revision="r")
PODS = ("pod-0", "pod-1", "pod-2", "pod-3")
SERVED_A, CANDIDATE_A, BATCH, BASE_TPS = 0.25, 0.70, 8.0, 100.0


@dataclass
class Pods:
    """Which pods speculate, as the operator's effects and pod convergence leave them."""

    fleet_on: bool = False
    canary: tuple[str, ...] = ()
    canary_alone: bool = False  # the canary pods were told to speculate with the candidate on their own
    served_a: float = SERVED_A  # the served draft's acceptance (the candidate's once promoted)
    candidate_a: float = CANDIDATE_A  # the candidate's live acceptance on the traffic
    actions: list[act.Action] = field(default_factory=list)

    def apply(self, actions: list[act.Action], state: PolicyState) -> None:
        self.actions += actions
        for action in actions:
            if isinstance(action, act.SetSpeculation):
                self.fleet_on = action.enabled
            elif isinstance(action, act.Promote):
                self.served_a = self.candidate_a
            elif isinstance(action, act.StartCanary):
                self.canary, self.canary_alone = action.pods, getattr(action, "speculate", False)
        lifecycle = state.lifecycle
        if lifecycle.phase is not Phase.CANARY:  # promoted or rolled back: every pod follows the fleet again
            self.canary, self.canary_alone = (), False

    def observe(self) -> Observation:
        canary_speculates = self.fleet_on or self.canary_alone
        canary = control = None
        if self.canary:
            canary = _group(self.candidate_a) if canary_speculates else PodGroupMetrics(None, BASE_TPS)
            control = _group(self.served_a) if self.fleet_on else PodGroupMetrics(None, BASE_TPS)
        served = _group(self.served_a) if self.fleet_on else None
        return Observation(
            acceptance_length=served.acceptance_length if served else None,
            per_position_acceptance=(self.served_a,) if served else (),
            batch_size=BATCH, acceptance_samples=5000 if served else 0, promoted_version="v1",
            canary=canary, control=control, ready_pods=PODS)


def _group(a: float) -> PodGroupMetrics:
    speedup = max(practical_speedup(a, g, BATCH) for g in (1, 2, 3))
    return PodGroupMetrics(expected_acceptance_length(a, 3), BASE_TPS * speedup, per_token_acceptance=a)


def _fleet_off_with_a_better_candidate() -> PolicyState:
    """Serving v1, which does not pay on the traffic (switch off); a candidate evaluated far better."""
    lifecycle = LifecycleState(phase=Phase.EVALUATING, phase_since=0.0, target_revision="r", capture_enabled=True,
                               candidate="r2", candidate_acceptance_length=expected_acceptance_length(0.72, 3))
    return PolicyState(speculation=SpeculationState(enabled=False), lifecycle=lifecycle,
                       acceptance_estimate=SERVED_A, probe=ProbeState(quiet_since=0.0, best_acceptance=SERVED_A))


def _run(passes: int = 20, candidate_a: float = CANDIDATE_A) -> tuple[Pods, PolicyState]:
    pods, state = Pods(candidate_a=candidate_a), _fleet_off_with_a_better_candidate()
    for i in range(passes):
        actions, state = decide(pods.observe(), state, PARAMS, 30.0 * (i + 1))
        pods.apply(actions, state)
    return pods, state


def test_a_better_candidate_is_promoted_while_the_fleet_does_not_speculate() -> None:
    pods, state = _run()
    kinds = [type(a) for a in pods.actions]
    assert act.StartCanary in kinds
    assert act.RollBack not in kinds  # before: no acceptance on the canary pods, Inconclusive, rolled back
    assert act.Promote in kinds
    assert state.lifecycle.rollbacks == 0
    # The promoted draft's estimate comes from what its canary pods measured: the switch turns on with it.
    assert state.acceptance_estimate == pytest.approx(CANDIDATE_A)
    assert state.speculation.enabled


def test_the_canary_pods_are_told_to_speculate_with_the_candidates_table() -> None:
    actions, state = decide(Pods().observe(), _fleet_off_with_a_better_candidate(), PARAMS, 30.0)
    start = next(a for a in actions if isinstance(a, act.StartCanary))
    assert start.speculate
    # The table the candidate's evaluation acceptance implies (what the fleet would run once promoted).
    assert start.tokens_per_batch_size is not None
    assert start.tokens_per_batch_size[0][0] == 1
    assert start.tokens_per_batch_size[-1][1] == PARAMS.max_batch_size
    assert max(g for _, _, g in start.tokens_per_batch_size) == PARAMS.num_speculative_tokens
    assert state.lifecycle.canary_alone
    assert state.lifecycle.canary_bands == start.tokens_per_batch_size


def test_a_canary_started_during_a_probe_speculates_alone_too() -> None:
    """The probe ends within one window and the fleet's pods stop again: the switch decides, not the probe."""
    state = _fleet_off_with_a_better_candidate()
    probing = PolicyState(speculation=state.speculation, lifecycle=state.lifecycle, acceptance_estimate=SERVED_A,
                          probe=ProbeState(started_at=0.0, best_acceptance=0.6))
    actions, state = decide(Pods(fleet_on=True).observe(), probing, PARAMS, 30.0)
    start = next(a for a in actions if isinstance(a, act.StartCanary))
    assert start.speculate
    assert state.lifecycle.canary_alone


def test_a_worse_candidate_alone_is_still_rolled_back() -> None:
    """Judged like a first draft: a candidate that does not pay at the observed load fails."""
    pods, state = _run(candidate_a=0.15)
    kinds = [type(a) for a in pods.actions]
    assert act.RollBack in kinds
    assert act.Promote not in kinds
    assert state.lifecycle.last_canary_reason == "CanaryFailed"


def test_with_the_fleet_speculating_the_canary_follows_it_and_is_judged_against_the_served_draft() -> None:
    state = _fleet_off_with_a_better_candidate()
    state = PolicyState(speculation=SpeculationState(enabled=True), lifecycle=state.lifecycle,
                        acceptance_estimate=0.6, table=((1, PARAMS.max_batch_size, 3),), table_acceptance=0.6)
    seen = Observation(acceptance_length=expected_acceptance_length(0.6, 3), per_position_acceptance=(0.6,),
                       batch_size=BATCH, acceptance_samples=5000, promoted_version="v1", ready_pods=PODS)
    actions, state = decide(seen, state, PARAMS, 30.0)
    start = next(a for a in actions if isinstance(a, act.StartCanary))
    assert not start.speculate
    assert start.tokens_per_batch_size is None
    assert not state.lifecycle.canary_alone


def test_with_the_switch_on_but_no_drafting_at_the_load_the_canary_speculates_alone() -> None:
    """The switch judges the draft at its best batch size, the table applies it per load: with the switch on
    the table's band at the observed load can be g = 0, and canary pods that followed it measured nothing
    (every such canary ended Inconclusive; bad_launch-12 in the policy bench's train seeds)."""
    state = _fleet_off_with_a_better_candidate()
    table = ((1, 4, 1), (5, PARAMS.max_batch_size, 0))  # speculates at batch <= 4 only
    state = PolicyState(speculation=SpeculationState(enabled=True), lifecycle=state.lifecycle,
                        acceptance_estimate=SERVED_A, table=table, table_acceptance=SERVED_A)
    actions, state = decide(Pods().observe(), state, PARAMS, 30.0)
    start = next(a for a in actions if isinstance(a, act.StartCanary))
    assert start.speculate
    assert state.lifecycle.canary_alone


def test_forced_off_keeps_the_canary_pods_off() -> None:
    """spec.control.speculation: Off is the user's: a canary does not switch pods on behind it."""
    from tide_operator.control.speculation import SpeculationMode

    params = PolicyParams(target_revision="r", speculation=SpeculationMode.OFF)
    actions, state = decide(Pods().observe(), _fleet_off_with_a_better_candidate(), params, 30.0)
    start = next(a for a in actions if isinstance(a, act.StartCanary))
    assert not start.speculate
    assert not state.lifecycle.canary_alone
