"""The lending pass (issue 17 item 3) against a fake cluster: the lent Deployment made with the
training class's room, pods put into service once ready, and before a trainer Job they leave service,
drain, are scaled away, and hold training until gone; status.lending and Events tell each step."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tide_operator.api.status import SpeculationStatus, TideDeploymentStatus
from tide_operator.config import OperatorConfig
from tide_operator.control.lending import SERVING_GATE
from tide_operator.control.lifecycle_types import LifecycleState, Phase
from tide_operator.control.policy import Observation, PolicyParams, PolicyState
from tide_operator.manifests import labels
from tide_operator.passes.control_loop import SensorReading
from tide_operator.passes.lending import TRAINING_HELD, Lending, lend
from tide_operator.passes.serving_status import StatusDraft

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "manifests"))
from manifest_fixtures import placement, spec_with

LENT = "chat-vllm-lent"


class FakeCluster:
    """The lent pods (as the kubelet reports them), the Deployments applied, the gates set."""

    def __init__(self) -> None:
        self.deployments: dict[str, dict[str, Any]] = {}
        self.lent_pods: dict[str, dict[str, Any]] = {}
        self.gates: list[tuple[str, str]] = []

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert selector == labels.lent_selector("chat")
        return list(self.lent_pods.values())

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.deployments.get(name)

    def deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.deployments.get(name)

    def apply(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> None:
        self.deployments[desired["metadata"]["name"]] = desired

    def set_pod_condition(self, namespace: str, pod: str, condition: dict[str, Any]) -> None:
        self.gates.append((pod, condition["status"]))
        conditions = self.lent_pods[pod]["status"]["conditions"]
        conditions[:] = [c for c in conditions if c["type"] != SERVING_GATE] + [condition]

    def start_pods(self, count: int) -> None:
        for i in range(count):
            self.lent_pods[f"lent-{i}"] = {"metadata": {"name": f"lent-{i}"}, "status": {
                "podIP": f"10.0.0.{i}", "conditions": [{"type": "ContainersReady", "status": "True"}]}}


def run(cluster: FakeCluster, draft: StatusDraft, lifecycle: LifecycleState, now: float,
        in_flight: int | None = 0, spec=None) -> SensorReading:
    reading = SensorReading(Observation(buffer_samples=0))
    lending = Lending(cluster, OperatorConfig(), adopt=lambda child: child,  # type: ignore[arg-type]
                      in_flight=lambda ip, port: in_flight)
    return lend("chat", "llm", spec or spec_with(training={"gpusPerJob": 8, "lendWhenIdle": True}),
                placement("H100", "H100"),
                draft, PolicyState(lifecycle=lifecycle), PolicyParams(target_revision="5f1c0e2"), reading,
                lending, now)


def new_draft() -> StatusDraft:
    status = TideDeploymentStatus(speculation=SpeculationStatus(enabled=True, modelled_speedup_percent=130))
    return StatusDraft(status, 1, datetime(2026, 12, 7, tzinfo=UTC))


IDLE = LifecycleState(phase=Phase.SERVING)
JOB = replace(IDLE, phase=Phase.TRAINING, active_run="r1")


def test_a_cycle_lend_drain_reclaim_and_lend_again() -> None:
    cluster, draft = FakeCluster(), new_draft()
    # Same-vendor classes behind a plain Service: H100 serves, H100 trains; its idle room is lent.
    held = run(cluster, draft, IDLE, now=0.0)
    # One Job's 8 GPUs as 4-GPU replicas (2 nodes x 8 GPUs, 2 x 4 serving: room for 2 x 4 left).
    assert cluster.deployments[LENT]["spec"]["replicas"] == 2
    assert draft.status.lending.state == "Lent"
    assert held.observation.training_deferred is None
    assert [e.reason for e in draft.events] == ["LendingStarted"]

    cluster.start_pods(2)
    held = run(cluster, draft, IDLE, now=30.0)
    assert cluster.gates == [("lent-0", "True"), ("lent-1", "True")]  # ready: into service
    assert held.observation.training_deferred == TRAINING_HELD  # lent pods hold the GPUs

    cluster.gates.clear()
    run(cluster, draft, JOB, now=60.0, in_flight=2)  # a Job wants the pool: drain
    assert cluster.gates == [("lent-0", "False"), ("lent-1", "False")]
    assert draft.status.lending.state == "Draining"
    assert draft.status.lending.draining_since
    assert cluster.deployments[LENT]["spec"]["replicas"] == 2  # nothing deleted while requests run
    assert draft.events[-1].reason == "LendingDraining"

    run(cluster, draft, JOB, now=90.0, in_flight=0)  # idle and out of service: scaled away
    assert cluster.deployments[LENT]["spec"]["replicas"] == 0
    assert draft.events[-1].reason == "LentReplicasDrained"
    cluster.lent_pods.clear()
    run(cluster, draft, IDLE, now=120.0)  # the Job ended and the pods are gone: lent again
    assert draft.status.lending.state == "Lent"
    assert cluster.deployments[LENT]["spec"]["replicas"] == 2


def test_lends_one_jobs_gpus_not_every_free_gpu() -> None:
    cluster = FakeCluster()
    run(cluster, new_draft(), IDLE, now=0.0, spec=spec_with(training={"gpusPerJob": 4, "lendWhenIdle": True}))
    assert cluster.deployments[LENT]["spec"]["replicas"] == 1  # room for 2, a Job holds 4 GPUs: 1 replica
    draft = new_draft()
    run(FakeCluster(), draft, IDLE, now=0.0, spec=spec_with(training={"gpusPerJob": 2, "lendWhenIdle": True}))
    assert draft.status.lending.reason == "NothingToLend"  # a Job's 2 GPUs hold no 4-GPU replica
    assert draft.status.lending.state == "Idle"


def test_the_drain_bound_survives_in_status() -> None:
    cluster, draft = FakeCluster(), new_draft()
    run(cluster, draft, IDLE, now=0.0)
    cluster.start_pods(1)
    run(cluster, draft, IDLE, now=10.0)
    run(cluster, draft, JOB, now=20.0, in_flight=5)
    since = draft.status.lending.draining_since
    run(cluster, draft, JOB, now=50.0, in_flight=5)
    assert draft.status.lending.draining_since == since
    assert cluster.deployments[LENT]["spec"]["replicas"] == 1
    run(cluster, draft, JOB, now=80.0, in_flight=5)  # 60 s after the drain began: the bound
    assert cluster.deployments[LENT]["spec"]["replicas"] == 0
    assert "bound of 60s reached with 5 request(s) in flight" in draft.events[-1].message


def test_training_waits_for_the_lent_pods_but_a_running_job_is_never_held() -> None:
    cluster, draft = FakeCluster(), new_draft()
    run(cluster, draft, IDLE, now=0.0)
    cluster.start_pods(1)
    assert run(cluster, draft, JOB, now=10.0, in_flight=1).observation.training_deferred is None  # would preempt
    due = replace(IDLE, phase=Phase.COLLECTING, phase_since=0.0)
    assert run(cluster, draft, due, now=20.0, in_flight=1).observation.training_deferred == TRAINING_HELD


def test_off_by_default_and_nothing_read() -> None:
    class Untouched:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"lending is off: no {name}")

    draft = new_draft()
    reading = SensorReading(Observation())
    lending = Lending(Untouched(), OperatorConfig(), adopt=lambda child: child)  # type: ignore[arg-type]
    assert lend("chat", "llm", spec_with(), placement(), draft, PolicyState(), PolicyParams(target_revision="r"),
                reading, lending, 0.0) is reading
    assert draft.status.lending is None


def test_a_slower_class_behind_a_plain_service_is_not_lent() -> None:
    cluster, draft = FakeCluster(), new_draft()
    spec = spec_with(training={"gpusPerJob": 4, "lendWhenIdle": True})
    reading = SensorReading(Observation())
    lending = Lending(cluster, OperatorConfig(), adopt=lambda child: child,  # type: ignore[arg-type]
                      in_flight=lambda ip, port: 0)
    lend("chat", "llm", spec, placement("H100", "MI250"), draft, PolicyState(lifecycle=IDLE),
         PolicyParams(target_revision="r"), reading, lending, 0.0)
    assert draft.status.lending.reason == "LendingDoesNotPay"
    assert LENT not in cluster.deployments
    assert "Even routing" in draft.status.lending.message


def test_a_slower_class_is_lent_behind_capacity_weighted_routing() -> None:
    from tide_operator.control.fleet import Routing

    cluster, draft = FakeCluster(), new_draft()
    spec = spec_with(training={"gpusPerJob": 4, "lendWhenIdle": True})
    lending = Lending(cluster, OperatorConfig(), adopt=lambda child: child,  # type: ignore[arg-type]
                      in_flight=lambda ip, port: 0, routing=Routing.WEIGHTED)
    lend("chat", "llm", spec, placement("H100", "MI250"), draft, PolicyState(lifecycle=IDLE),
         PolicyParams(target_revision="r"), SensorReading(Observation()), lending, 0.0)
    assert draft.status.lending.reason == "Lent"
    lent = cluster.deployments[LENT]
    assert lent["spec"]["replicas"] == 1  # the Job's 4 MI250 GPUs as one 4-GPU replica
    assert lent["spec"]["template"]["metadata"]["labels"][labels.GPU_CLASS_LABEL] == "MI250"
