"""Serving groups on the real control plane (issue 17 item 1, inference.servingGroups).

One Deployment serves three replicas on the fake H100 pool; the spec then asks for serving groups (one
H100 replica, the rest on the MI250 pool): a Deployment per class, each requiring its class alone, and
the one Deployment scaled down as the groups become ready, then deleted. Then the groups are switched
off and the one Deployment comes back the same way. A sampler counts the Ready serving pods throughout:
never fewer than one below the total (the rolling update's maxUnavailable of 1). Requests come from a
client that follows pod readiness (the local plane has no Service endpoints).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import events_where, wait_for
from tests.integration.promotion_flow import (
    create,
    patch_spec,
    seed_draft_files,
    simulated_operator,
    spec,
    status,
    upload,
)
from tests.integration.test_lending import GOOD, SELECTOR, ReadyClient, quiet_scenario

pytestmark = pytest.mark.integration

GROUPS = [{"gpuClass": "H100", "maxReplicas": 1}, {"gpuClass": "MI250"}]


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(quiet_scenario("general", {"initial": {"general": GOOD}})))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    with simulated_operator(plane, kube, scenario_file, tmp_path_factory.mktemp("train")) as process:
        yield process


class ReadySampler:
    """The fewest Ready serving pods seen (not being deleted), sampled every 0.2 s."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.core, self.namespace = client.CoreV1Api(kube), namespace
        self.fewest: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ReadySampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _sample(self) -> None:
        while not self._stop.is_set():
            ready = len(ready_pods(self.core, self.namespace))
            self.fewest = ready if self.fewest is None else min(self.fewest, ready)
            self._stop.wait(0.2)


def ready_pods(core: Any, namespace: str) -> dict[str, str]:
    """{pod: node pool} of the Ready serving pods not being deleted."""
    pods = core.list_namespaced_pod(namespace, label_selector=SELECTOR).items
    return {p.metadata.name: p.spec.node_name.rsplit("-", 1)[0] for p in pods
            if not p.metadata.deletion_timestamp and p.spec.node_name
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])}


def deployments(kube: Any, namespace: str) -> dict[str, tuple[int, int]]:
    """{Deployment: (replicas, ready)} of the serving Deployments."""
    items = client.AppsV1Api(kube).list_namespaced_deployment(namespace, label_selector=SELECTOR).items
    return {d.metadata.name: (d.spec.replicas, d.status.ready_replicas or 0) for d in items}


def groups_in_status(kube: Any, namespace: str) -> list[tuple[str, int, int]]:
    return [(g["gpuClass"], g["replicas"], g.get("replicasReady", 0))
            for g in status(kube, namespace).get("servingGroups") or ()]


def test_serving_groups_migrate_on_and_off_without_a_gap(kube, namespace, operator, s3, s3_endpoint,
                                                         scenario_file, tmp_path):
    s3.create_bucket(Bucket="tide-groups")
    upload(s3, "tide-groups", "seed-draft", seed_draft_files(tmp_path / "seed"))
    body = spec("tide-groups", s3_endpoint)
    body["inference"] = {"replicas": 3, "gpusPerReplica": 1, "gpuClasses": ["H100"]}
    create(kube, namespace, body)
    core = client.CoreV1Api(kube)
    wait_for(lambda: deployments(kube, namespace) == {"chat-vllm": (3, 3)}, "the one Deployment ready", timeout_s=120)

    with ReadyClient(kube, namespace) as traffic, ReadySampler(kube, namespace) as sampler:
        patch_spec(kube, namespace, {"inference": {"gpuClasses": ["H100", "MI250"], "servingGroups": GROUPS}})
        wait_for(lambda: deployments(kube, namespace) == {"chat-vllm-h100": (1, 1), "chat-vllm-mi250": (2, 2)},
                 "the groups ready and the one Deployment gone", timeout_s=180)
        on = wait_for(lambda: (g := groups_in_status(kube, namespace)) == [("H100", 1, 1), ("MI250", 2, 2)] and g,
                      "status.servingGroups", timeout_s=30)
        # The one Deployment's pods go after it (garbage collection): until then they still serve.
        pools = wait_for(lambda: (p := ready_pods(core, namespace)) and sorted(p.values()) == ["h100", "mi250", "mi250"]
                         and p, "only the groups' pods serve", timeout_s=60)
        wait_for(lambda: all(traffic.ok[pod] > 0 for pod in pools), "requests answered on both classes",
                 timeout_s=60)
        fewest_on = sampler.fewest

        patch_spec(kube, namespace, {"inference": {"gpuClasses": ["H100"], "servingGroups": None}})
        wait_for(lambda: deployments(kube, namespace) == {"chat-vllm": (3, 3)},
                 "the one Deployment back and the groups gone", timeout_s=180)
        wait_for(lambda: "servingGroups" not in status(kube, namespace), "status.servingGroups cleared", timeout_s=30)
        back = wait_for(lambda: (p := ready_pods(core, namespace)) and sorted(p.values()) == ["h100"] * 3 and p,
                        "only the one Deployment's pods serve", timeout_s=60)
        wait_for(lambda: all(traffic.ok[pod] > 0 for pod in back), "requests answered after the return",
                 timeout_s=60)

    retired = events_where(kube, namespace, lambda es: sum(e.reason == "ServingRetired" for e in es) >= 3,
                           "a ServingRetired Event per Deployment that left")
    assert {e.message.split()[1] for e in retired if e.reason == "ServingRetired"} == {
        "chat-vllm", "chat-vllm-h100", "chat-vllm-mi250"}
    assert on == [("H100", 1, 1), ("MI250", 2, 2)]
    assert fewest_on is not None
    assert fewest_on >= 2, f"{fewest_on} Ready serving pods at the fewest while the groups came in"
    assert sampler.fewest is not None
    assert sampler.fewest >= 2, f"{sampler.fewest} Ready serving pods at the fewest while the groups left"
    print(f"served {sum(traffic.ok.values())} requests, {len(traffic.failed)} failed: "
          f"{traffic.failed[:3]}; fewest Ready {sampler.fewest}")  # the figures, with -s
    assert traffic.failed == [], traffic.failed[:5]
