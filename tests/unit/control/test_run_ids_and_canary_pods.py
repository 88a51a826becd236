"""Run ids carry a hash of the TideDeployment's UID; the canary's pods are chosen once and kept."""

from __future__ import annotations

import re

import pytest

from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryAnalysis, CanaryParams, PodGroupMetrics
from tide_operator.control.lifecycle import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    TrainingParams,
    run_id_for,
    run_number,
    step_lifecycle,
)
from tide_operator.control.restart import lifecycle_from_dict, lifecycle_to_dict, rebuild_lifecycle
from tide_operator.manifests import names

REV = "rev-1"
UID = "0b7e5d4c-3a2b-4c1d-9e8f-7a6b5c4d3e2f"
PARAMS = LifecycleParams(training=TrainingParams(sample_threshold=10), deployment_uid=UID,
                         canary=CanaryParams(replicas=2, analysis_window_s=300, measurement_interval_s=60,
                                             failure_limit=0))


def given(**kwargs: object) -> LifecycleInput:
    base = {"shift": False, "buffer_samples": 0, "served_acceptance_length": 2.0, "target_revision": REV}
    return LifecycleInput(**(base | kwargs))  # type: ignore[arg-type]


# ---- run ids -----------------------------------------------------------------------------------


def test_run_ids_carry_a_hash_of_the_uid_so_a_recreated_deployment_never_reuses_one() -> None:
    first, recreated = run_id_for(1, UID), run_id_for(1, "another-uid-of-the-same-name")
    assert re.fullmatch(r"[0-9a-f]{8}-r1", first)
    assert first != recreated
    assert run_id_for(1, UID) == first  # deterministic: a restarted operator finds its own Job
    assert run_id_for(7) == "r7"  # no UID: the old form


@pytest.mark.parametrize(("run_id", "number"), [
    ("r7", 7), ("3fa9c2d1-r12", 12), (run_id_for(40, UID), 40),
    ("seed", None), ("r", None), ("xyz-r3", None), ("3fa9c2d1-r3x", None),
])
def test_run_number_reads_both_forms_and_nothing_else(run_id: str, number: int | None) -> None:
    assert run_number(run_id) == number


@pytest.mark.parametrize("td_name", ["chat", "a" * 58, "b" + "-x" * 28 + "c"])  # the CRD's 58-char limit
@pytest.mark.parametrize("counter", [1, 99999])
def test_trainer_job_names_stay_dns_labels_of_at_most_63_chars(td_name: str, counter: int) -> None:
    job = names.trainer_job_name(td_name, run_id_for(counter, UID))
    assert len(job) <= 63
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job)
    assert job != names.trainer_job_name(td_name, run_id_for(counter, "recreated-uid"))
    assert job != names.trainer_job_name(td_name, run_id_for(counter + 1, UID))


def test_a_launch_uses_the_uid_run_id_and_remembers_it() -> None:
    step = step_lifecycle(LifecycleState(phase=Phase.COLLECTING, target_revision=REV, capture_enabled=True),
                          given(buffer_samples=10), PARAMS, now=1.0)
    launch = next(a for a in step.actions if isinstance(a, act.LaunchTraining))
    assert launch.run_id == run_id_for(1, UID)
    assert (step.state.active_run, step.state.last_run) == (launch.run_id, launch.run_id)


def test_state_from_before_reads_and_a_restart_adopts_jobs_of_either_form() -> None:
    old = {"phase": "Training", "run_counter": 3, "active_run": "r3", "target_revision": REV}
    state = lifecycle_from_dict(old)  # no canary_pods, no last_run: still reads
    assert (state.active_run, state.canary_pods, state.last_run) == ("r3", (), None)
    newest = run_id_for(5, UID)
    rebuilt = rebuild_lifecycle({"phase": "Collecting", "run_counter": 3}, ["r3", run_id_for(4, UID), newest], 9.0)
    assert (rebuilt.run_counter, rebuilt.active_run, rebuilt.last_run, rebuilt.phase) == (5, newest, newest,
                                                                                          Phase.TRAINING)


# ---- canary pods -------------------------------------------------------------------------------


def _evaluating() -> LifecycleState:
    return LifecycleState(phase=Phase.EVALUATING, phase_since=0.0, target_revision=REV, capture_enabled=True,
                          candidate="c1", candidate_acceptance_length=2.6)


def test_the_canary_starts_on_the_first_ready_pods_by_name_and_records_them() -> None:
    step = step_lifecycle(_evaluating(), given(ready_pods=("chat-c", "chat-a", "chat-b")), PARAMS, now=10.0)
    start = next(a for a in step.actions if isinstance(a, act.StartCanary))
    assert start.pods == ("chat-a", "chat-b") == step.state.canary_pods
    assert "chat-a, chat-b" in start.message
    # JSON round trip (status): the pods come back as a tuple, equal to what was stored.
    assert lifecycle_from_dict(lifecycle_to_dict(step.state)) == step.state


def test_the_rollback_names_exactly_the_recorded_pods_whatever_is_ready_now() -> None:
    canary = LifecycleState(phase=Phase.CANARY, phase_since=0.0, target_revision=REV, capture_enabled=True,
                            candidate="c1", candidate_acceptance_length=2.6, canary=CanaryAnalysis(started_at=0.0),
                            canary_pods=("chat-a", "chat-b"))
    worse = given(ready_pods=("chat-0", "chat-b", "chat-z"), canary=PodGroupMetrics(1.2, 90.0),
                  control=PodGroupMetrics(2.0, 100.0))
    first = step_lifecycle(canary, worse, PARAMS, now=60.0)  # one difference: its noise is unknown yet
    step = step_lifecycle(first.state, worse, PARAMS, now=120.0)
    back = next(a for a in step.actions if isinstance(a, act.RollBack))
    assert back.pods == ("chat-a", "chat-b")
    assert step.state.canary_pods == ()
    aborted = step_lifecycle(canary, given(abort_canary=True), PARAMS, now=61.0)
    assert next(a for a in aborted.actions if isinstance(a, act.RollBack)).pods == ("chat-a", "chat-b")
    pinned = step_lifecycle(canary, given(draft_pin="v1"), PARAMS, now=62.0)
    assert next(a for a in pinned.actions if isinstance(a, act.RollBack)).pods == ("chat-a", "chat-b")


def test_a_promotion_clears_the_canary_pods() -> None:
    canary = LifecycleState(phase=Phase.CANARY, phase_since=0.0, target_revision=REV, capture_enabled=True,
                            candidate="c1", candidate_acceptance_length=2.6, canary=CanaryAnalysis(started_at=0.0),
                            canary_pods=("chat-a",))
    better = given(canary=PodGroupMetrics(2.6, 100.0), control=PodGroupMetrics(2.0, 100.0))
    state, now = canary, 60.0
    for _ in range(4):  # a first measurement (noise unknown), then consecutiveSuccessLimit
        step = step_lifecycle(state, better, PARAMS, now)
        state, now = step.state, now + 60.0
    assert any(isinstance(a, act.Promote) for a in step.actions)
    assert state.canary_pods == ()
