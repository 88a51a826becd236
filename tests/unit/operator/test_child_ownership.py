"""A reconcile pass never writes to, adopts or uses an object named like a child that it does not own."""

from __future__ import annotations

from typing import Any

from tide_operator.api import TideDeploymentStatus
from tide_operator.config import OperatorConfig, StorageConfig
from tide_operator.control.lifecycle import LifecycleState, run_id_for
from tide_operator.control.placement import NodeInventory
from tide_operator.control.policy import PolicyState
from tide_operator.manifests import names
from tide_operator.reconcile import child_names, reconcile

# The spec runs under the operator's identity (no credentialsSecret): its bucket must be lent.
LENDS_TIDE = OperatorConfig(storage=StorageConfig(buckets=("tide",)))

UID = "td-uid"
BODY = {"metadata": {"name": "chat", "namespace": "team", "uid": UID, "generation": 2},
        "spec": {"target": {"model": "m", "revision": "r1"}, "inference": {"replicas": 1, "gpusPerReplica": 1},
                 "storage": {"s3": {"bucket": "tide"}}}}


class ReadOnlyCluster:
    """Children as given; any write fails the test."""

    def __init__(self, live: dict[tuple[str, str], dict]) -> None:
        self.live = live

    def node_inventory(self, exclude: Any = None) -> list[NodeInventory]:
        return [NodeInventory(f"h100-{i}", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 8})
                for i in range(2)]

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.live.get((kind, name))

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the pass called cluster.{name}")


def owned_by(uid: str | None, name: str) -> dict:
    refs = [{"kind": "TideDeployment", "name": "chat", "uid": uid}] if uid else []
    return {"metadata": {"name": name, "ownerReferences": refs}}


def test_foreign_children_are_named_in_degraded_with_a_warning_and_nothing_is_written() -> None:
    taken = {("Service", "chat-vllm"): owned_by(None, "chat-vllm"),
             ("Secret", "chat-control"): owned_by("someone-else", "chat-control"),
             ("ConfigMap", "chat-serving"): owned_by(UID, "chat-serving")}  # ours: not a conflict
    result = reconcile(BODY, ReadOnlyCluster(taken), LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    degraded = next(c for c in result.status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ChildConflict")
    assert "Secret chat-control exists owned by TideDeployment/chat" in degraded["message"]
    assert "Service chat-vllm exists with no owner" in degraded["message"]
    assert "ConfigMap" not in degraded["message"]
    warnings = [e for e in result.events if e.type == "Warning"]
    assert [e.reason for e in warnings] == ["ChildConflict"]
    assert "Service chat-vllm" in warnings[0].message
    assert result.applied == ()


def test_the_names_checked_are_the_children_and_the_next_runs_jobs() -> None:
    fresh = TideDeploymentStatus()
    first = names.trainer_job_name("chat", run_id_for(1, UID))
    evaluation = names.evaluation_job_name("chat", run_id_for(1, UID))
    assert child_names("chat", fresh, UID) == [("Secret", "chat-control"), ("ConfigMap", "chat-serving"),
                                               ("Service", "chat-vllm"), ("Deployment", "chat-vllm"),
                                               ("PodDisruptionBudget", "chat-vllm"), ("Job", first),
                                               ("Job", evaluation)]
    assert first.startswith("chat-train-")
    assert first.endswith("-r1")
    assert first != "chat-train-r1"
    assert evaluation.startswith("chat-eval-")
    after_two_runs = fresh.model_copy(update={"control_state": PolicyState(
        lifecycle=LifecycleState(run_counter=2)).to_dict()})
    assert child_names("chat", after_two_runs, UID)[-2:] == [
        ("Job", names.trainer_job_name("chat", run_id_for(3, UID))),
        ("Job", names.evaluation_job_name("chat", run_id_for(3, UID)))]


def test_a_namesake_of_the_next_recall_evaluation_job_is_a_conflict() -> None:
    """The next run may be a recall: its evaluation Job's name is checked before anything depends on it."""
    job = names.evaluation_job_name("chat", run_id_for(1, UID))
    taken = {("Job", job): owned_by(None, job)}
    result = reconcile(BODY, ReadOnlyCluster(taken), LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    degraded = next(c for c in result.status["conditions"] if c["type"] == "Degraded")
    assert f"Job {job} exists with no owner" in degraded["message"]


def test_a_namesake_of_the_next_trainer_job_is_a_conflict() -> None:
    job = names.trainer_job_name("chat", run_id_for(1, UID))
    taken = {("Job", job): owned_by(None, job)}
    result = reconcile(BODY, ReadOnlyCluster(taken), LENDS_TIDE, adopt=lambda c: c)  # type: ignore[arg-type]
    degraded = next(c for c in result.status["conditions"] if c["type"] == "Degraded")
    assert f"Job {job} exists with no owner" in degraded["message"]
