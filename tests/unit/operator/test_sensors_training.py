"""The training sensors: the buffer counts samples since the last launch; Evaluating reads the report."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from tide_operator.control.lifecycle import LifecycleState, Phase, TrainingStatus
from tide_operator.control.policy import PolicyState
from tide_operator.sensors import last_launch_time, trainer_outcome


class FakeCluster:
    def __init__(self, jobs):
        self._jobs = jobs

    def jobs(self, namespace, selector):
        run = selector.split("=", 1)[1]
        return [j for j in self._jobs if j["metadata"]["labels"]["tide.dev/training-run"] == run]


def _job(run, created, succeeded=False):
    return {"metadata": {"name": f"chat-train-{run}", "labels": {"tide.dev/training-run": run},
                         "creationTimestamp": created}, "status": {"succeeded": 1} if succeeded else {}}


class FakeRegistry:
    def candidate_manifest(self, run):
        return SimpleNamespace(eval={"candidate_acceptance_length": 2.9, "baseline_acceptance_length": 1.05})


def _state(**lifecycle):
    return PolicyState(lifecycle=replace(LifecycleState(), **lifecycle))


def test_launch_time_is_the_latest_runs_job_creation():
    cluster = FakeCluster([_job("r1", "2026-12-02T14:00:00Z"), _job("r2", "2026-12-02T14:10:00+00:00")])
    assert last_launch_time("chat", "ns", _state(), cluster) == 0.0  # never launched: the whole buffer
    assert last_launch_time("chat", "ns", _state(run_counter=2), cluster) == 1796220600.0
    assert last_launch_time("chat", "ns", _state(run_counter=3), cluster) == 0.0  # Job gone


def test_evaluating_reads_the_candidates_report_baseline():
    state = _state(phase=Phase.EVALUATING, candidate="r1", candidate_acceptance_length=2.9)
    seen = trainer_outcome("chat", "ns", state, FakeCluster([]), FakeRegistry())
    assert seen is not None
    assert (seen.run_id, seen.status) == ("r1", TrainingStatus.SUCCEEDED)
    assert seen.served_acceptance_length == 1.05


def test_training_outcome_from_the_job():
    state = _state(phase=Phase.TRAINING, active_run="r1", run_counter=1)
    seen = trainer_outcome("chat", "ns", state, FakeCluster([_job("r1", "2026-12-02T14:00:00Z", True)]),
                           FakeRegistry())
    assert seen is not None
    assert (seen.status, seen.candidate_acceptance_length) == (TrainingStatus.SUCCEEDED, 2.9)
