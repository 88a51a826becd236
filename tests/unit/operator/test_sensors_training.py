"""The training sensors: the buffer counts samples since the last launch; Evaluating reads the report;
a failed Job's pod tells a trainer that judged its candidate not better (exit 7) from a failure."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tide_operator.control.lifecycle import LifecycleState, Phase, TrainingStatus
from tide_operator.control.policy import PolicyState
from tide_operator.passes.sensors import NOT_BETTER_EXIT_CODE, failed_run, last_launch_time, trainer_outcome


class FakeCluster:
    def __init__(self, jobs, pods=()):
        self._jobs, self._pods = jobs, list(pods)

    def jobs(self, namespace, selector):
        return [j for j in self._jobs if _selected(j, selector)]

    def pods(self, namespace, selector):
        return [p for p in self._pods if _selected(p, selector)]


def _selected(obj, selector):
    key, value = selector.split("=", 1)
    return obj["metadata"]["labels"].get(key) == value


def _job(run, created, succeeded=False, failed=False, name=None):
    status = {"succeeded": 1} if succeeded else {"failed": 1} if failed else {}
    return {"metadata": {"name": name or f"chat-train-{run}", "labels": {"tide.dev/training-run": run},
                         "creationTimestamp": created}, "status": status}


def _trainer_pod(run, exit_code=None, message=None, job="chat-train"):
    terminated = {k: v for k, v in (("exitCode", exit_code), ("message", message)) if v is not None}
    return {"metadata": {"name": f"{job}-{run}-x7k2q", "labels": {"tide.dev/training-run": run,
                                                                  "job-name": f"{job}-{run}"}},
            "status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}]}}


# The trainer's last line (trainer/tide_trainer/cli.py _finish) for a candidate that lost.
NOT_BETTER_SUMMARY = json.dumps({"exit_code": 7, "result": "not_better", "report": "/w/eval.json", "candidate": None,
                                 "baseline": "parent_draft", "baseline_acceptance_length": 2.31,
                                 "candidate_acceptance_length": 2.24, "min_improvement": 0.0, "better": False})


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


def test_launch_time_follows_the_remembered_run_id_and_old_state_the_old_ids():
    cluster = FakeCluster([_job("r2", "2026-12-02T14:00:00Z"), _job("3fa9c2d1-r2", "2026-12-02T14:10:00Z")])
    assert last_launch_time("chat", "ns", _state(run_counter=2, last_run="3fa9c2d1-r2"), cluster) == 1796220600.0
    assert last_launch_time("chat", "ns", _state(run_counter=2), cluster) == 1796220000.0  # status from before


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


def test_the_exit_code_is_the_trainers_not_better():
    from tide_trainer.cli import ExitCode

    assert ExitCode.NOT_BETTER == NOT_BETTER_EXIT_CODE  # the operator does not import the trainer (torch)


@pytest.mark.parametrize(("exit_code", "message", "status", "lengths"), [
    (7, NOT_BETTER_SUMMARY, TrainingStatus.NOT_BETTER, (2.24, 2.31)),
    (7, None, TrainingStatus.NOT_BETTER, (None, None)),  # no termination log (e.g. a process runtime)
    (None, NOT_BETTER_SUMMARY, TrainingStatus.NOT_BETTER, (2.24, 2.31)),  # only the summary says so
    (7, "{truncated", TrainingStatus.NOT_BETTER, (None, None)),
    (6, json.dumps({"exit_code": 6, "result": "storage", "error": "NoSuchBucket"}), TrainingStatus.FAILED,
     (None, None)),
    (1, None, TrainingStatus.FAILED, (None, None)),
    (137, None, TrainingStatus.FAILED, (None, None)),  # OOM-killed
])
def test_a_failed_job_is_read_from_its_trainer_container(exit_code, message, status, lengths):
    seen = failed_run("r2", [_trainer_pod("r2", exit_code, message)])
    assert (seen.run_id, seen.status) == ("r2", status)
    assert (seen.candidate_acceptance_length, seen.served_acceptance_length) == lengths


def test_a_failed_job_without_its_pod_is_a_failure():
    assert failed_run("r2", []).status is TrainingStatus.FAILED
    running = _trainer_pod("r2")
    running["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-12-02T14:00:00Z"}}
    assert failed_run("r2", [running]).status is TrainingStatus.FAILED


def test_a_not_better_job_is_observed_as_not_better_not_failed():
    state = _state(phase=Phase.TRAINING, active_run="r2", run_counter=2)
    cluster = FakeCluster([_job("r2", "2026-12-02T14:00:00Z", failed=True)],
                          [_trainer_pod("r2", 7, NOT_BETTER_SUMMARY)])
    seen = trainer_outcome("chat", "ns", state, cluster, FakeRegistry())
    assert seen is not None
    assert (seen.status, seen.candidate_acceptance_length, seen.served_acceptance_length) == (
        TrainingStatus.NOT_BETTER, 2.24, 2.31)


def test_another_deployments_run_of_the_same_id_is_not_ours():
    state = _state(phase=Phase.TRAINING, active_run="r2", run_counter=2)
    theirs = [_job("r2", "2026-12-02T14:00:00Z", failed=True, name="code-train-r2")]
    cluster = FakeCluster([*theirs, _job("r2", "2026-12-02T14:00:00Z")],
                          [_trainer_pod("r2", 7, NOT_BETTER_SUMMARY, job="code-train")])
    seen = trainer_outcome("chat", "ns", state, cluster, FakeRegistry())
    assert seen is not None
    assert seen.status is TrainingStatus.RUNNING  # ours is still running; theirs failing is not our verdict
