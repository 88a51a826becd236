"""Lent replicas on the training pool (issue 17 items 2 and 3, training.lendWhenIdle) on the real control plane.

The simulator serves on the fake H100 pool; the training pool's share (one Job's 2 GPUs) serves too, as
two lent replicas behind the tide.dev/serving readiness gate: on H100 behind the plain Service, and on
the MI250 pool behind an HTTPRoute that weights each class's Service by capacity. Traffic comes from a
client that follows pod readiness, as a Service's endpoints do (the local plane has none): each request
goes to a pod that is Ready when it is sent. The traffic shifts, the lifecycle wants a trainer Job, and the operator
drains the lent pods first: out of service, in-flight requests finish (read on the pods' /metrics),
scaled away; the Job starts only once they are gone, no request fails, and after the Job the lent
replicas serve again. The simulator's background load is off here: every request in flight is the
client's, so the drain ends on idle pods, not on its bound.

Behind a plain Service the fleet split lends only a class at least as fast per replica as the serving one
(fleet.py); the MI250 pool is lent only with inference.gateway set and HTTPRoutes served. No Gateway
controller runs here: the HTTPRoute CRD is a minimal one (schema left open) and the test reads the
weights the operator writes; its client still follows pod readiness.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import events_where, wait_for
from tests.integration.promotion_flow import (
    create,
    lifecycle,
    patch_spec,
    scenario,
    seed_draft_files,
    simulated_operator,
    spec,
    status,
    trained_job,
    upload,
)

pytestmark = pytest.mark.integration

GOOD, SHIFTED = 0.8, 0.5
SELECTOR = "app.kubernetes.io/component=inference,tide.dev/deployment=chat"  # the vLLM pods, lent or not
LENT = "tide.dev/serving-group=lent"


ROUTE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "httproutes.gateway.networking.k8s.io",
                 # *.k8s.io groups are protected: the Gateway API's own CRDs carry this annotation.
                 "annotations": {"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api"}},
    "spec": {"group": "gateway.networking.k8s.io", "scope": "Namespaced",
             "names": {"plural": "httproutes", "singular": "httproute", "kind": "HTTPRoute",
                       "listKind": "HTTPRouteList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def quiet_scenario(domain: str, acceptance: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The promotion scenario without background load: what runs on a pod is what the client sent."""
    world = scenario(domain, acceptance)
    world["timeline"][0]["background_running"] = 0
    return world


class ReadyClient:
    """Closed-loop clients that send each request to a serving pod Ready at that moment (round robin)."""

    def __init__(self, kube: Any, namespace: str, workers: int = 4) -> None:
        self.core, self.namespace = client.CoreV1Api(kube), namespace
        self.ok: Counter[str] = Counter()
        self.failed: list[str] = []
        self._ready: list[tuple[str, str]] = []
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._watch, daemon=True)]
        self._threads += [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(workers)]

    def __enter__(self) -> ReadyClient:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _watch(self) -> None:
        while not self._stop.is_set():
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=SELECTOR).items
            ready = [(p.metadata.name, p.status.pod_ip) for p in pods
                     if p.status.pod_ip and not p.metadata.deletion_timestamp
                     and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
            with self._lock:
                self._ready = sorted(ready)
            self._stop.wait(0.3)

    def _work(self, worker: int) -> None:
        turn = worker
        while not self._stop.is_set():
            with self._lock:
                ready = list(self._ready)
            if not ready:
                self._stop.wait(0.2)
                continue
            turn += 1
            pod, ip = ready[turn % len(ready)]
            body = {"model": "chat", "prompt": "one two three four", "max_tokens": 24}
            request = urllib.request.Request(f"http://{ip}:8000/v1/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    json.loads(answer.read())
            except (OSError, ValueError) as e:
                with self._lock:
                    self.failed.append(f"{pod}: {type(e).__name__}: {e}")
                continue
            with self._lock:
                self.ok[pod] += 1


class Timeline:
    """Polls the lent pods and the trainer Jobs together: the first Job seen, with the lent pods then."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.core, self.batch, self.namespace = client.CoreV1Api(kube), client.BatchV1Api(kube), namespace
        self.custom = client.CustomObjectsApi(kube)
        self.lent_when_job_seen: list[str] | None = None
        self.weights_when_job_seen: dict[str, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _poll(self) -> None:
        while not self._stop.is_set() and self.lent_when_job_seen is None:
            lent = [p.metadata.name for p in self.core.list_namespaced_pod(
                self.namespace, label_selector=f"{SELECTOR},{LENT}").items]
            weights = route_weights(self.custom, self.namespace)
            jobs = [j for j in self.batch.list_namespaced_job(self.namespace).items
                    if j.metadata.name.startswith("chat-train-")]
            if jobs:
                self.lent_when_job_seen, self.weights_when_job_seen = lent, weights
            self._stop.wait(0.2)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(quiet_scenario("general", {})))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    try:
        client.ApiextensionsV1Api(kube).create_custom_resource_definition(ROUTE_CRD)
    except client.ApiException as e:
        if e.status != 409:  # another module on this plane installed it
            raise
    wait_for(lambda: route_served(kube), "HTTPRoute served", timeout_s=30)
    with simulated_operator(plane, kube, scenario_file, tmp_path_factory.mktemp("train")) as process:
        yield process


def route_served(kube: Any) -> bool:
    groups = client.ApisApi(kube).get_api_versions().groups or []
    return any(g.name == "gateway.networking.k8s.io" for g in groups)


def route_weights(custom: Any, namespace: str) -> dict[str, int]:
    """{Service: weight} of the operator's HTTPRoute ({} while there is none)."""
    try:
        route = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "httproutes",
                                                    "chat-vllm")
    except client.ApiException as e:
        if e.status == 404:
            return {}
        raise
    return {b["name"]: b["weight"] for rule in route["spec"]["rules"] for b in rule["backendRefs"]}


def lent_in_service(kube: Any, namespace: str, count: int) -> list[str] | None:
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector=f"{SELECTOR},{LENT}").items
    serving = [p.metadata.name for p in pods
               if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    return serving if len(serving) == count else None


def nodes_of(kube: Any, namespace: str, pods: list[str]) -> set[str]:
    core = client.CoreV1Api(kube)
    return {core.read_namespaced_pod(pod, namespace).spec.node_name.rsplit("-", 1)[0] for pod in pods}


class Cycle:
    """What one lend, drain and lend-again cycle showed."""

    def __init__(self) -> None:
        self.lent: list[str] = []
        self.back: list[str] = []
        self.weights_lent: dict[str, int] = {}
        self.weights_back: dict[str, int] = {}
        self.timeline: Timeline | None = None
        self.drain_message = ""
        self.traffic: ReadyClient | None = None


def lend_drain_and_lend_again(kube, namespace, plane, s3, s3_endpoint, scenario_file, tmp_path, bucket: str,
                              inference: dict, training: dict, weighted: bool) -> Cycle:
    acceptance = {"initial": {"general": GOOD, "legal": SHIFTED}, "r1": {"general": GOOD, "legal": GOOD},
                  "v1": {"general": GOOD, "legal": GOOD}}
    scenario_file.write_text(yaml.safe_dump(quiet_scenario("general", acceptance)))
    s3.create_bucket(Bucket=bucket)
    upload(s3, bucket, "seed-draft", seed_draft_files(tmp_path / "seed"))
    body = spec(bucket, s3_endpoint)
    body["inference"], body["training"] = inference, training
    create(kube, namespace, body)
    custom, seen = client.CustomObjectsApi(kube), Cycle()

    def weighted_by(lent: int) -> dict[str, int] | None:
        weights = route_weights(custom, namespace)
        return weights if len(weights) == 2 and all(weights.values()) == bool(lent) else None

    with ReadyClient(kube, namespace) as traffic:
        seen.traffic = traffic
        seen.lent = wait_for(lambda: lent_in_service(kube, namespace, 2), "two lent replicas in service",
                             timeout_s=120)
        wait_for(lambda: all(traffic.ok[pod] > 0 for pod in seen.lent), "requests answered by the lent pods",
                 timeout_s=60)
        wait_for(lambda: (status(kube, namespace).get("speculation") or {}).get("enabled"), "speculation on",
                 timeout_s=60)
        if weighted:
            seen.weights_lent = wait_for(lambda: weighted_by(2), "both classes weighted in the HTTPRoute",
                                         timeout_s=60)

        with Timeline(kube, namespace) as timeline:
            # The traffic shifts: acceptance falls, collection starts, and the first Job is due.
            patch_spec(kube, namespace, {"control": {"capture": {"enabled": True}}})
            scenario_file.write_text(yaml.safe_dump(quiet_scenario("legal", acceptance)))
            try:
                wait_for(lambda: trained_job(kube, plane, namespace), "the trainer Job succeeded", timeout_s=240)
            except AssertionError as e:
                st = status(kube, namespace)
                control = st.get("controlState") or {}
                raise AssertionError(f"{e}\nlending: {st.get('lending')}\nlifecycle: {lifecycle(st).get('phase')} "
                                     f"{control.get('lifecycle_reason')}: {control.get('lifecycle_message')}") from e
        seen.timeline = timeline
        drained = events_where(kube, namespace, lambda es: any(e.reason == "LentReplicasDrained" for e in es),
                               "the LentReplicasDrained Event")
        seen.drain_message = next(e.message for e in drained if e.reason == "LentReplicasDrained")
        assert any(e.reason == "LendingDraining" for e in drained)

        # The Job ended: the training share serves again.
        seen.back = wait_for(lambda: lent_in_service(kube, namespace, 2), "the lent replicas back in service",
                             timeout_s=120)
        wait_for(lambda: all(traffic.ok[pod] > 0 for pod in seen.back), "requests answered by the new lent pods",
                 timeout_s=60)
        if weighted:
            seen.weights_back = wait_for(lambda: weighted_by(2), "the lent class weighted again", timeout_s=60)
        time.sleep(1)
    return seen


def assert_cycle(seen: Cycle, kube: Any, namespace: str) -> None:
    """What holds for any class: drained before the Job, idle at the drain's end, no failed request."""
    assert seen.timeline is not None
    assert seen.traffic is not None
    assert seen.timeline.lent_when_job_seen == [], f"lent pods at the Job: {seen.timeline.lent_when_job_seen}"
    assert "bound" not in seen.drain_message, seen.drain_message  # idle pods, not the bound, ended the drain
    assert set(seen.back).isdisjoint(seen.lent)  # new pods: the drained ones were deleted
    traffic = seen.traffic
    assert traffic.failed == [], traffic.failed[:5]
    assert sum(traffic.ok.values()) > 100
    assert lifecycle(status(kube, namespace))["run_counter"] >= 1
    lent_ok = sum(traffic.ok[p] for p in (*seen.lent, *seen.back))
    print(f"served {sum(traffic.ok.values())} requests ({lent_ok} on lent pods), 0 failed; "
          f"{seen.drain_message}; weights lent {seen.weights_lent}, at the Job "
          f"{seen.timeline.weights_when_job_seen}, back {seen.weights_back}")  # the figures, with -s


def test_the_same_class_is_lent_behind_the_plain_service(kube, namespace, operator, plane, s3, s3_endpoint,
                                                         scenario_file, tmp_path):
    seen = lend_drain_and_lend_again(
        kube, namespace, plane, s3, s3_endpoint, scenario_file, tmp_path, "tide-lend",
        inference={"replicas": 1, "gpusPerReplica": 1, "gpuClasses": ["H100"]},
        training={"gpuClasses": ["H100"], "gpusPerJob": 2, "lendWhenIdle": True}, weighted=False)
    assert_cycle(seen, kube, namespace)
    lending = status(kube, namespace)["lending"]
    assert (lending["state"], lending["gpuClass"], lending["replicas"]) == ("Lent", "H100", 2)
    assert lending["reason"] == "Lent"
    assert route_weights(client.CustomObjectsApi(kube), namespace) == {}  # no gateway named: no route


def test_mi250_training_gpus_serve_beside_h100_behind_weighted_routing(kube, namespace, operator, plane, s3,
                                                                      s3_endpoint, scenario_file, tmp_path):
    seen = lend_drain_and_lend_again(
        kube, namespace, plane, s3, s3_endpoint, scenario_file, tmp_path, "tide-lend-mi250",
        inference={"replicas": 1, "gpusPerReplica": 1, "gpuClasses": ["H100"], "gateway": {"name": "inference"}},
        training={"gpuClasses": ["MI250"], "gpusPerJob": 2, "lendWhenIdle": True}, weighted=True)
    assert_cycle(seen, kube, namespace)
    assert nodes_of(kube, namespace, seen.back) == {"mi250"}
    # One H100 replica (6.76 per GPU) beside two lent MI250 replicas (1.0 each), at the same speedup.
    weights = seen.weights_lent
    assert set(weights) == {"chat-vllm-h100", "chat-vllm-mi250"}
    assert weights["chat-vllm-h100"] / weights["chat-vllm-mi250"] == pytest.approx(6.76 / 2, rel=0.01)
    assert seen.timeline.weights_when_job_seen["chat-vllm-mi250"] == 0  # drained: no traffic routed there
    services = client.CoreV1Api(kube).read_namespaced_service("chat-vllm-mi250", namespace)
    assert services.spec.selector["tide.dev/gpu-class"] == "MI250"
    lending = status(kube, namespace)["lending"]
    assert (lending["gpuClass"], lending["reason"]) == ("MI250", "Lent")

    routing = status(kube, namespace)["routing"]
    assert [(b["gpuClass"], b["service"]) for b in routing["backends"]] == [
        ("H100", "chat-vllm-h100"), ("MI250", "chat-vllm-mi250")]

    # The gateway leaves the spec: the route goes first, then each class Service; the plain Service stays.
    patch_spec(kube, namespace, {"inference": {"gateway": None}})
    wait_for(lambda: "routing" not in status(kube, namespace), "status.routing cleared", timeout_s=60)
    assert route_weights(client.CustomObjectsApi(kube), namespace) == {}
    services = {s.metadata.name for s in client.CoreV1Api(kube).list_namespaced_service(namespace).items}
    assert "chat-vllm" in services
    assert services.isdisjoint({"chat-vllm-h100", "chat-vllm-mi250"}), services
    assert events_where(kube, namespace, lambda es: any(e.reason == "RoutingRemoved" for e in es),
                        "the RoutingRemoved Event")
