"""Lent replicas on the training pool (issue 17 item 3, training.lendWhenIdle) on the real control plane.

The simulator serves on the fake H100 pool; its training share (one Job's 2 GPUs) serves too, as two
lent replicas behind the tide.dev/serving readiness gate. Traffic comes from a client that follows
pod readiness, as a Service's endpoints do (the local plane has none): each request goes to a pod that
is Ready when it is sent. The traffic shifts, the lifecycle wants a trainer Job, and the operator
drains the lent pods first: out of service, in-flight requests finish (read on the pods' /metrics),
scaled away; the Job starts only once they are gone, no request fails, and after the Job the lent
replicas serve again. The simulator's background load is off here: every request in flight is the
client's, so the drain ends on idle pods, not on its bound.

Same class on both sides: behind a plain Service the fleet split lends only a class at least as fast per
replica as the serving one (fleet.py); a slower class needs capacity-weighted routing.
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
    operator_config,
    patch_spec,
    seed_draft_files,
    spec,
    status,
    trained_job,
    upload,
)
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_e2e.sim_draft import CAPTURE

pytestmark = pytest.mark.integration

GOOD, SHIFTED = 0.8, 0.5
SELECTOR = "app.kubernetes.io/component=inference,tide.dev/deployment=chat"  # the vLLM pods, lent or not
LENT = "tide.dev/serving-group=lent"


def quiet_scenario(domain: str, acceptance: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The promotion scenario without background load: what runs on a pod is what the client sent."""
    return {"seed": 5, "acceptance": acceptance, "capture": CAPTURE,
            "timeline": [{"at_s": 0, "domain": domain, "background_running": 0}]}


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
        self.lent_when_job_seen: list[str] | None = None
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
            jobs = [j for j in self.batch.list_namespaced_job(self.namespace).items
                    if j.metadata.name.startswith("chat-train-")]
            if jobs:
                self.lent_when_job_seen = lent
            self._stop.wait(0.2)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(quiet_scenario("general", {})))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    install_crd(kube)
    grant_operator_rbac(kube)
    process = OperatorProcess(plane, operator_config(scenario_file, tmp_path_factory.mktemp("train"))).start()
    yield process
    process.stop()


def lent_in_service(kube: Any, namespace: str, count: int) -> list[str] | None:
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector=f"{SELECTOR},{LENT}").items
    serving = [p.metadata.name for p in pods
               if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    return serving if len(serving) == count else None


def test_lent_replicas_serve_drain_before_the_trainer_job_and_come_back(kube, namespace, operator, plane, s3,
                                                                        s3_endpoint, scenario_file, tmp_path):
    bucket = "tide-lend"
    acceptance = {"initial": {"general": GOOD, "legal": SHIFTED}, "r1": {"general": GOOD, "legal": GOOD},
                  "v1": {"general": GOOD, "legal": GOOD}}
    scenario_file.write_text(yaml.safe_dump(quiet_scenario("general", acceptance)))
    s3.create_bucket(Bucket=bucket)
    upload(s3, bucket, "seed-draft", seed_draft_files(tmp_path / "seed"))
    body = spec(bucket, s3_endpoint)
    body["inference"] = {"replicas": 1, "gpusPerReplica": 1, "gpuClasses": ["H100"]}
    body["training"] = {"gpuClasses": ["H100"], "gpusPerJob": 2, "lendWhenIdle": True}
    create(kube, namespace, body)

    with ReadyClient(kube, namespace) as traffic:
        lent = wait_for(lambda: lent_in_service(kube, namespace, 2), "two lent replicas in service", timeout_s=120)
        wait_for(lambda: all(traffic.ok[pod] > 0 for pod in lent), "requests answered by the lent pods",
                 timeout_s=60)
        st = status(kube, namespace)
        assert st["lending"]["state"] == "Lent"
        assert st["lending"]["gpuClass"] == "H100"
        assert st["lending"]["replicas"] == 2
        assert st["lending"]["reason"] == "Lent"
        wait_for(lambda: (status(kube, namespace).get("speculation") or {}).get("enabled"), "speculation on",
                 timeout_s=60)

        with Timeline(kube, namespace) as timeline:
            # The traffic shifts: acceptance falls, collection starts, and the first Job is due.
            patch_spec(kube, namespace, {"control": {"capture": {"enabled": True}}})
            scenario_file.write_text(yaml.safe_dump(quiet_scenario("legal", acceptance)))
            wait_for(lambda: trained_job(kube, plane, namespace), "the trainer Job succeeded", timeout_s=240)
        assert timeline.lent_when_job_seen == [], f"lent pods still there at the Job: {timeline.lent_when_job_seen}"

        drained = events_where(kube, namespace, lambda es: any(e.reason == "LentReplicasDrained" for e in es),
                               "the LentReplicasDrained Event")
        drain = next(e for e in drained if e.reason == "LentReplicasDrained")
        assert "bound" not in drain.message, drain.message  # idle pods, not the bound, ended the drain
        assert any(e.reason == "LendingDraining" for e in drained)

        # The Job ended: the training share serves again.
        back = wait_for(lambda: lent_in_service(kube, namespace, 2), "the lent replicas back in service",
                        timeout_s=120)
        assert set(back).isdisjoint(lent)  # new pods: the drained ones were deleted
        wait_for(lambda: all(traffic.ok[pod] > 0 for pod in back), "requests answered by the new lent pods",
                 timeout_s=60)
        time.sleep(1)
    assert traffic.failed == [], traffic.failed[:5]
    assert sum(traffic.ok.values()) > 100
    assert lifecycle(status(kube, namespace))["run_counter"] >= 1
    print(f"served {sum(traffic.ok.values())} requests ({sum(traffic.ok[p] for p in (*lent, *back))} on lent pods), "
          f"0 failed; {drain.message}")  # the figures, with -s
