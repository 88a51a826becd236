"""Trainer exit 8 (no GPU visible) is a failed run whose reason and message name the missing GPU."""

from __future__ import annotations

import json

from tide_operator.control.lifecycle import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    Phase,
    TrainingObservation,
    TrainingStatus,
    step_lifecycle,
)
from tide_operator.passes.control_loop import TRAINING_OUTCOMES
from tide_operator.passes.sensors import failed_run


def _pod(exit_code: int | None, message: str = "") -> dict:
    terminated = {"message": message, **({"exitCode": exit_code} if exit_code is not None else {})}
    return {"status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}]}}


def test_exit_8_is_seen_as_no_gpu() -> None:
    assert failed_run("r1", [_pod(8)]).status is TrainingStatus.NO_GPU
    summary = json.dumps({"exit_code": 8, "result": "no_gpu", "error": "no GPU"})
    assert failed_run("r1", [_pod(None, summary)]).status is TrainingStatus.NO_GPU  # code from the summary
    assert failed_run("r1", [_pod(1)]).status is TrainingStatus.FAILED


def test_the_lifecycle_names_the_missing_gpu() -> None:
    before = LifecycleState(phase=Phase.TRAINING, active_run="r1", target_revision="r1", capture_enabled=True)
    seen = LifecycleInput(shift=False, buffer_samples=0, served_acceptance_length=2.0, target_revision="r1",
                          training=TrainingObservation("r1", TrainingStatus.NO_GPU))
    step = step_lifecycle(before, seen, LifecycleParams(), now=100.0)
    assert step.state.phase is Phase.COLLECTING
    assert step.state.training_failures == 1
    assert step.reason == "TrainingNoGpu"
    assert "no GPU visible" in step.message
    assert "vendorImages" in step.message
    assert TRAINING_OUTCOMES[step.reason] == "failed"  # a Warning Event, counted as a failed run
