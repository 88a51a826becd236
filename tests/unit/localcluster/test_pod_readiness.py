"""Readiness gates: Ready needs every container ready and every gate's condition True (no cluster needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from tide_localcluster.podstatus import GATES_NOT_READY, ContainerView, PodView, closed_gate, readiness_gates

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
GATE = "tide.dev/serving"


def conditions(*, ready: bool = True, api_conditions: dict[str, str] | None = None) -> dict[str, dict]:
    view = PodView(pod_ip="127.1.0.2", started=T0, restart_policy="Always", initialized=True,
                   containers=[ContainerView("a", "i", running_since=T0, ready=ready)],
                   readiness_gates=(GATE,), api_conditions=api_conditions or {})
    return {c["type"]: c for c in view.to_status(T0)["conditions"]}


@pytest.mark.parametrize(("gate", "ready"), [("True", "True"), ("False", "False"), (None, "False")])
def test_ready_follows_the_gate_and_an_absent_gate_is_closed(gate, ready):
    seen = conditions(api_conditions={GATE: gate} if gate else {})
    assert seen["Ready"]["status"] == ready
    assert seen["ContainersReady"]["status"] == "True"  # gates hold back Ready only


def test_a_closed_gate_says_which_and_why():
    assert conditions()["Ready"]["reason"] == GATES_NOT_READY
    assert closed_gate((GATE,), {}) == (GATES_NOT_READY, f'corresponding condition of pod readiness gate "{GATE}" '
                                                         "does not exist.")
    assert closed_gate((GATE, "b"), {GATE: "True", "b": "False"}) == (
        GATES_NOT_READY, 'the status of pod readiness gate "b" is not "True", but False')
    assert conditions(api_conditions={GATE: "True"})["Ready"]["reason"] is None  # a stale reason is cleared


def test_unready_containers_keep_the_pod_unready_whatever_the_gate():
    seen = conditions(ready=False, api_conditions={GATE: "True"})
    assert (seen["Ready"]["status"], seen["ContainersReady"]["status"]) == ("False", "False")


def test_the_kubelet_reports_only_its_own_conditions():
    """A strategic merge patch keyed by type then leaves the operator's gate condition alone."""
    assert set(conditions(api_conditions={GATE: "True", "Other": "False"})) == {
        "Initialized", "Ready", "ContainersReady"}


def test_readiness_gates_are_read_from_the_spec():
    assert readiness_gates({"readinessGates": [{"conditionType": GATE}, {"conditionType": "b"}]}) == (GATE, "b")
    assert readiness_gates({"containers": []}) == ()
