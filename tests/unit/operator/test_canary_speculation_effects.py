"""A canary while the fleet does not speculate, through the effects and pod convergence: its pods switch on
with the candidate's table when it starts, convergence keeps them so while it runs (a fleet-wide switch
that reached them is repeated) and returns them to the fleet's setting once it ended; the control pass
hands convergence the canary only while the fleet's pods do not speculate."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from test_draft_convergence import FakePod, FakeRegistry, effects, pointer

from tide_contracts.serving_control import ServingStatus
from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryAnalysis
from tide_operator.control.lifecycle import LifecycleState, Phase
from tide_operator.control.policy import PolicyState
from tide_operator.control.probe import ProbeState
from tide_operator.control.speculation import SpeculationState
from tide_operator.passes.control_loop import _speculating_canary
from tide_operator.passes.pod_convergence import CanarySpeculation

BANDS = ((1, 40, 3), (41, 200, 2), (201, 256, 0))


class SwitchPod(FakePod):
    """Reports the speculation it was last told (off to start with: the fleet's switch is off)."""

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.switches: list[tuple[bool, Any]] = []
        self._speculate(False, None)

    def set_speculation(self, request: Any) -> None:
        bands = [tuple(b) for b in request.tokens_per_batch_size] if request.tokens_per_batch_size else None
        self.switches.append((request.enabled, bands))
        self._speculate(request.enabled, request.tokens_per_batch_size)

    def set_capture(self, request: Any) -> None:
        raise AssertionError("capture is as desired here")

    def _speculate(self, enabled: bool, bands: Any) -> None:
        reported: ServingStatus = self.reported
        speculation = reported.speculation.model_copy(update={
            "enabled": enabled, "tokens_per_batch_size": [list(b) for b in bands] if bands else None})
        self.reported = reported.model_copy(update={"speculation": speculation})


def _pods() -> dict[str, SwitchPod]:
    return {"chat-a": SwitchPod("v3"), "chat-b": SwitchPod("v3")}


def test_the_canary_pods_speculate_with_the_candidates_table_when_the_fleet_does_not() -> None:
    pods = _pods()
    fx = effects(pods, FakeRegistry(pointer()))  # type: ignore[arg-type]
    fx.start_canary(act.StartCanary("3fa9c2d1-r4", 1, "CandidateBetter", "m", ("chat-a",), speculate=True,
                                    tokens_per_batch_size=BANDS))
    assert pods["chat-a"].loads == [("s3://tide/team/chat/candidates/3fa9c2d1-r4", None, None)]
    assert pods["chat-a"].switches == [(True, list(BANDS))]
    assert pods["chat-b"].switches == []  # the control pods stay off: the throughput control


def test_a_canary_that_follows_the_fleet_switches_nothing() -> None:
    pods = _pods()
    effects(pods, FakeRegistry(pointer())).start_canary(  # type: ignore[arg-type]
        act.StartCanary("3fa9c2d1-r4", 1, "CandidateBetter", "m", ("chat-a",)))
    assert pods["chat-a"].switches == pods["chat-b"].switches == []


def test_convergence_keeps_the_canary_pods_speculating_and_returns_them_when_it_ends() -> None:
    pods = _pods()
    fx = effects(pods, FakeRegistry(pointer()))  # type: ignore[arg-type]
    canary = CanarySpeculation(("chat-a",), BANDS)
    # A fleet-wide "off" (a probe's end) reached the canary pod: it is switched on again with its table.
    assert fx.converge(False, False, None, canary) == ["chat-a: speculation on"]
    assert pods["chat-a"].switches == [(True, list(BANDS))]
    assert pods["chat-b"].switches == []
    assert fx.converge(False, False, None, canary) == []  # as desired: nothing repeated
    # The canary ended (rolled back or promoted): the pod returns to the fleet's setting.
    assert fx.converge(False, False, None, None) == ["chat-a: speculation off"]
    assert pods["chat-a"].switches[-1] == (False, None)


def test_the_control_pass_names_the_canary_only_while_it_speculates_alone() -> None:
    canary = LifecycleState(phase=Phase.CANARY, candidate="r2", canary=CanaryAnalysis(started_at=0.0),
                            canary_pods=("chat-a",), canary_alone=True, canary_bands=BANDS)
    off = PolicyState(speculation=SpeculationState(enabled=False), lifecycle=canary)
    assert _speculating_canary(off) == CanarySpeculation(("chat-a",), BANDS)
    # The switch turned on during the canary: its table may still draft nothing at the load, the canary
    # pods keep the candidate's (what the fleet runs once it is promoted).
    assert _speculating_canary(replace(off, speculation=SpeculationState(enabled=True))) == CanarySpeculation(
        ("chat-a",), BANDS)
    # A probe has every pod draft with its table: the canary pods follow it like every pod.
    assert _speculating_canary(replace(off, probe=ProbeState(started_at=10.0))) is None
    # A canary that followed the fleet from the start, or none running.
    assert _speculating_canary(replace(off, lifecycle=replace(canary, canary_alone=False))) is None
    assert _speculating_canary(replace(off, lifecycle=replace(canary, phase=Phase.ROLLED_BACK))) is None


def test_the_state_with_a_canarys_table_survives_a_restart() -> None:
    canary = LifecycleState(phase=Phase.CANARY, candidate="r2", canary=CanaryAnalysis(started_at=0.0),
                            canary_pods=("chat-a",), canary_alone=True, canary_bands=BANDS)
    state = PolicyState(lifecycle=canary)
    assert PolicyState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_status_from_before_loads_without_the_canarys_speculation() -> None:
    data = PolicyState(lifecycle=LifecycleState(phase=Phase.CANARY, candidate="r2")).to_dict()
    del data["lifecycle"]["canary_alone"], data["lifecycle"]["canary_bands"]
    loaded = PolicyState.from_dict(data)
    assert not loaded.lifecycle.canary_alone
    assert loaded.lifecycle.canary_bands is None
