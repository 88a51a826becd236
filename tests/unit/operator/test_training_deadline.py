"""A trainer Job stopped at its deadline (activeDeadlineSeconds) is a failed run, and status says so."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tide_operator.api import parse_spec
from tide_operator.control.lifecycle import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    TrainingObservation,
    TrainingStatus,
    step_lifecycle,
)
from tide_operator.control.policy import PolicyState
from tide_operator.passes.sensors import trainer_outcome

DEADLINE = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
            "message": "Job was active longer than specified deadline"}


class FakeCluster:
    def __init__(self, status: dict) -> None:
        self.status = status

    def jobs(self, namespace: str, selector: str) -> list[dict]:
        return [{"metadata": {"name": "chat-train-r1", "labels": {"tide.dev/training-run": "r1"}},
                 "status": self.status}]

    def pods(self, namespace: str, selector: str) -> list[dict]:
        return []  # the Job controller deleted the hung pod


@pytest.mark.parametrize(("status", "seen"), [
    ({"failed": 1, "conditions": [DEADLINE]}, TrainingStatus.DEADLINE_EXCEEDED),
    ({"conditions": [DEADLINE]}, TrainingStatus.DEADLINE_EXCEEDED),  # before the counts are updated
    ({"failed": 1}, TrainingStatus.FAILED),
    ({"active": 1}, TrainingStatus.RUNNING),
])
def test_a_job_past_its_deadline_is_seen_as_such(status: dict, seen: TrainingStatus) -> None:
    state = PolicyState(lifecycle=replace(LifecycleState(), phase=Phase.TRAINING, active_run="r1"))
    outcome = trainer_outcome("chat", "llm", state, FakeCluster(status), registry=None)  # type: ignore[arg-type]
    assert outcome is not None
    assert outcome.status is seen


def test_the_lifecycle_names_the_deadline_as_the_failure() -> None:
    before = LifecycleState(phase=Phase.TRAINING, active_run="r1", target_revision="r1", capture_enabled=True)
    seen = LifecycleInput(shift=False, buffer_samples=0, served_acceptance_length=2.0, target_revision="r1",
                          training=TrainingObservation("r1", TrainingStatus.DEADLINE_EXCEEDED))
    step = step_lifecycle(before, seen, LifecycleParams(), now=100.0)
    assert step.state.phase is Phase.COLLECTING
    assert step.state.training_failures == 1
    assert step.reason == "TrainingDeadlineExceeded"
    assert "ran past its deadline (control.training.timeout)" in step.message


def test_the_timeout_field_is_checked() -> None:
    from tide_operator.api import SpecError

    body = {"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide-b"}},
            "control": {"training": {"timeout": "40s"}}}
    assert parse_spec(body).control.training.timeout == "40s"
    body["control"]["training"]["timeout"] = "5s"
    with pytest.raises(SpecError, match="timeout"):
        parse_spec(body)
