"""The faults of a real cluster, survived by a running TideDeployment (issue 14 item 7).

One deployment's story on the shared plane (simulator pods, real Prometheus, loopback S3 behind a
proxy, the real trainer Job), one fault per test, in order:

1. a serving pod SIGKILLed while it loads the canary candidate (its S3 read held open by the proxy);
2. the kube-apiserver restarted mid-canary, then the canary promotes v1 once;
3. etcd restarted (same data directory);
4. Prometheus stopped until the operator reports it unreachable, then started again;
5. the node of a serving pod lost (heartbeats stopped, its processes gone) until its pods are
   evicted and come back on the other H100 node, serving the promoted v1 by themselves.

Each ends with the promoted pointer unchanged or advanced exactly once (read in S3), one trainer
Job, and status or Events that say what happened. Faults 2-5 restart shared components: each test
waits until the apiserver answers and every node is Ready and untainted again before it ends.
The summary prints `fault | survived | nothing lost` from the rows the tests fill.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import boto3
import pytest
import yaml
from kubernetes import client
from urllib3.exceptions import HTTPError

from tests.integration.kubewait import wait_for
from tests.integration.promotion_flow import (
    condition,
    create,
    events_once,
    history,
    keys,
    lifecycle,
    patch_spec,
    pod_drafts,
    registry_prefix,
    scenario,
    seed_draft_files,
    simulated_operator,
    spec,
    status,
    status_where,
    upload,
)
from tests.integration.s3_recorder import S3Recorder
from tide_localcluster import faults

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BUCKET = "tide-faults"
# The candidate (whatever its run id) and v1 beat the launch draft on live traffic: the canary succeeds.
ACCEPTANCE = {"initial": {"general": 0.6}, "*": {"general": 0.8}}
# Capture from the start; a drift threshold no noise reaches; a window long enough to restart in.
CONTROL = {"capture": {"enabled": True, "samplingPercent": 20}, "drift": {"thresholdPercent": 50},
           "canary": {"analysisWindow": "40s"}}
SERVING = "tide.dev/deployment=chat,app.kubernetes.io/component=inference"  # the vLLM pods, not the trainer's
NO_SECOND_RUN = {"control": {"training": {"sampleThreshold": 4096}}}


class GatedS3(S3Recorder):
    """The deployment's S3 endpoint: a proxy that holds the first GET of a candidate's file until
    released, so a test can act while a pod is in the middle of loading it."""

    def __init__(self, upstream: str, held_prefix: str) -> None:
        self.held_prefix = held_prefix
        self.held = threading.Event()
        self.release = threading.Event()
        self.held_client_port = 0
        self._armed = True
        super().__init__(upstream)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def _hold(self, command: str, path: str, client_port: int) -> None:
        key = unquote(urlsplit(path).path).lstrip("/").partition("/")[2]
        with self._lock:
            hold = (self._armed and command == "GET" and key.startswith(self.held_prefix)
                    and key.endswith("/model.safetensors"))
            if hold:
                self._armed, self.held_client_port = False, client_port
        if hold:
            self.held.set()
            self.release.wait(timeout=60)

    def _handler(self):  # type: ignore[no-untyped-def]
        gate, base = self, super()._handler()

        class Held(base):  # type: ignore[valid-type,misc]
            def _gated(self) -> None:
                gate._hold(self.command, self.path, self.client_address[1])
                base._forward(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _gated

        return Held


@dataclass
class Story:
    """What the tests of this module share: the deployment's namespace and what they learnt."""

    namespace: str
    prefix: str
    s3: object
    proxy: GatedS3
    broken: str = ""  # why a later test cannot go on
    notes: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("general", ACCEPTANCE)))
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, scenario_file, tmp_path_factory):
    with simulated_operator(plane, kube, scenario_file, tmp_path_factory.mktemp("train")) as process:
        yield process


@pytest.fixture(scope="module")
def story(kube, plane, operator, s3_endpoint, tmp_path_factory) -> Iterator[Story]:
    core = client.CoreV1Api(kube)
    namespace = f"t-cluster-faults-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: any(sa.secrets for sa in core.list_namespaced_service_account(namespace).items),
             "the default service account's token", timeout_s=30)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    prefix = registry_prefix(namespace)
    with GatedS3(s3_endpoint, f"{prefix}/candidates/") as proxy:
        try:
            yield Story(namespace, prefix, s3, proxy)
        finally:
            proxy.release.set()
            for node in faults.lost_nodes(Path(plane.state_dir)):  # the plane's other tests need every node
                faults.restore_node(Path(plane.state_dir), node)
            core.delete_namespace(namespace)


@pytest.fixture
def row(story: Story, fault_report: list, request) -> Iterator[dict]:
    """The test's row of the table. Each column turns "yes" only where the test sets it, after the
    checks it stands for (the last statement sets "nothing lost"), so a failing check leaves "no"."""
    name = request.node.function.__doc__.strip().splitlines()[0].rstrip(".")
    if story.broken:
        fault_report.append(faults.FaultRow(name, False, False))
        pytest.fail(f"the story broke earlier: {story.broken}")
    cells = {"survived": False, "nothing_lost": False}
    yield cells
    fault_report.append(faults.FaultRow(name, cells["survived"], cells["nothing_lost"]))
    if not all(cells.values()):
        story.broken = request.node.name


# --- probes ---

def trainer_jobs(kube, namespace: str) -> list[tuple[str, str]]:
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace, label_selector="tide.dev/training-run").items
    return sorted((j.metadata.name, j.metadata.uid) for j in jobs)


def trained_run(kube, plane, namespace: str) -> str | None:
    """The run id of the first trainer Job once it succeeded (fails the test, with its log, if it failed)."""
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace, label_selector="tide.dev/training-run").items
    for job in jobs:
        if job.status.failed:
            logs = sorted((Path(plane.state_dir) / "pods" / namespace).glob(f"{job.metadata.name}-*/trainer.log"))
            raise AssertionError(f"trainer Job {job.metadata.name} failed:\n"
                                 + (logs[0].read_text(errors="replace") if logs else "(no log)"))
        if job.status.succeeded:
            return job.metadata.labels["tide.dev/training-run"]
    return None


def pointer(story: Story) -> tuple[bytes, str] | None:
    if not keys(story.s3, BUCKET, f"{story.prefix}/promoted.json"):
        return None
    obj = story.s3.get_object(Bucket=BUCKET, Key=f"{story.prefix}/promoted.json")
    return obj["Body"].read(), obj["ETag"]


def registry_story(story: Story) -> list[tuple[str, str, str]]:
    return [(e["action"], e["version"], e["run_id"]) for e in history(story.s3, BUCKET, story.prefix)]


def serving_pods(kube, namespace: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector=SERVING).items
    return sorted((p for p in pods if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)


def plane_problems(kube, plane) -> dict[str, list[str]]:
    """Empty when the apiserver answers and every node is Ready, without unreachable/not-ready taints."""
    if not faults.apiserver_ready(plane):
        return {"kube-apiserver": ["/readyz does not answer"]}
    nodes = client.CoreV1Api(kube).list_node().items
    problems = {n.metadata.name: faults.node_problems(kube.sanitize_for_serialization(n)) for n in nodes}
    return {name: p for name, p in problems.items() if p}


def wait_plane_healthy(kube, plane, timeout_s: float = 90) -> None:
    """The shared plane as the other tests expect it, or a failure naming what is still wrong."""
    deadline, problems = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        try:
            problems = plane_problems(kube, plane)
        except (client.ApiException, OSError, HTTPError) as e:
            problems = {"kube-apiserver": [str(e)[:200]]}
        if not problems:
            return
        time.sleep(0.5)
    raise AssertionError(f"the plane is not healthy {timeout_s:.0f}s after the fault: {problems}")


def nothing_lost(kube, story: Story, pointer_now, registry_now, jobs_now) -> None:
    """The promoted pointer, the registry's history and the one trainer Job are as they were."""
    assert pointer(story) == pointer_now
    assert registry_story(story) == registry_now
    assert trainer_jobs(kube, story.namespace) == jobs_now


def pools(kube, namespace: str) -> dict[str, str]:
    """Each serving pod's fake node pool (its GPU class on this plane)."""
    nodes = {n.metadata.name: n.metadata.labels.get("tide.dev/fake-node-pool")
             for n in client.CoreV1Api(kube).list_node().items}
    return {p.metadata.name: nodes.get(p.spec.node_name) for p in serving_pods(kube, namespace)}


def no_new_decisions(kube, namespace: str) -> None:
    """Still the one promotion and the one canary: no rollback, no second canary or run."""
    messages = events_once(kube, namespace, lambda ms: all(any(m.startswith(f"{a}:") for m in ms)
                                                          for a in ("Promote", "StartCanary", "LaunchTraining")),
                           "the Promote, StartCanary and LaunchTraining Events")
    for action in ("Promote", "StartCanary", "LaunchTraining"):
        assert sum(m.startswith(f"{action}:") for m in messages) == 1, (action, messages)
    assert not [m for m in messages if m.startswith("RollBack:")], messages


def all_serve(kube, namespace: str, version: str) -> dict | None:
    drafts = pod_drafts(kube, namespace)
    return drafts if len(drafts) == 2 and set(drafts.values()) == {version} else None


# --- the story ---

def test_serving_pod_killed_during_a_swap(kube, plane, s3_endpoint, story, row, tmp_path_factory):
    """serving pod killed during a swap (canary load)."""
    ns, s3 = story.namespace, story.s3
    s3.create_bucket(Bucket=BUCKET)
    upload(s3, BUCKET, "seed-draft", seed_draft_files(tmp_path_factory.mktemp("seed")))
    create(kube, ns, spec(BUCKET, story.proxy.url, CONTROL))
    run = wait_for(lambda: trained_run(kube, plane, ns), "the first trainer Job succeeded", timeout_s=200)
    patch_spec(kube, ns, NO_SECOND_RUN)  # one run in this story: a second Job would be a duplicate
    jobs = trainer_jobs(kube, ns)
    assert len(jobs) == 1

    # The canary's load reads the candidate's files: the proxy holds the first read, and the pod
    # that holds the connection is the one mid-swap. It crashes there.
    assert story.proxy.held.wait(timeout=90), "no pod started loading the candidate"
    names = [p.metadata.name for p in serving_pods(kube, ns)]
    victim = wait_for(lambda: faults.pod_with_connection(Path(plane.state_dir), ns, names,
                                                         story.proxy.held_client_port, story.proxy.port),
                      "the pod whose candidate read is held", timeout_s=10)
    faults.kill_pod_process(Path(plane.state_dir), ns, victim)
    story.proxy.release.set()

    def restarted():
        pod = client.CoreV1Api(kube).read_namespaced_pod(victim, ns)
        statuses = pod.status.container_statuses or []
        return statuses and statuses[0].restart_count >= 1 and statuses[0].ready and statuses[0]

    wait_for(restarted, f"{victim} restarted by the kubelet and Ready", timeout_s=60)
    # The swap failed on the pod; the canary goes on (on it or another pod) with the candidate.
    wait_for(lambda: sorted(pod_drafts(kube, ns).values()) == sorted(["initial", run]) or None,
             f"candidate {run} on one canary pod after the crash", timeout_s=90)
    st = wait_for(lambda: status_where(kube, ns, lambda lc: lc.get("phase") == "Canary"), "phase Canary",
                  timeout_s=30)
    row["survived"] = True

    # the failed swap's Warning, naming the pod
    events_once(kube, ns, lambda ms: any(victim in m for m in ms), f"a Warning naming {victim}", kind="Warning")
    assert pointer(story) is None  # nothing promoted yet, nothing half-written
    assert keys(s3, BUCKET, f"{story.prefix}/drafts/") == []
    assert trainer_jobs(kube, ns) == jobs
    story.notes.update(jobs=jobs, run=run, canary_started=lifecycle(st)["canary"]["started_at"])
    row["nothing_lost"] = True


def test_apiserver_restarted_mid_canary(kube, plane, story, row):
    """kube-apiserver restarted mid-canary."""
    ns = story.namespace
    assert lifecycle(status(kube, ns)).get("phase") == "Canary"
    placed, gpu_class = pools(kube, ns), status(kube, ns)["inferencePool"]["gpuClass"]
    story.notes["apiserver_down_s"] = faults.restart_apiserver(plane)
    wait_plane_healthy(kube, plane)

    wait_for(lambda: all_serve(kube, ns, "v1"), "v1 promoted to every pod", timeout_s=120)
    st = wait_for(lambda: status_where(kube, ns, lambda lc: lc.get("last_promotion_at") is not None),
                  "the promotion in status", timeout_s=30)
    # Nodes were NotReady for a moment (no heartbeat reached the apiserver): nothing moved for it.
    assert (pools(kube, ns), st["inferencePool"]["gpuClass"]) == (placed, gpu_class)
    row["survived"] = True

    assert registry_story(story) == [("promote", "v1", story.notes["run"])]  # advanced exactly once
    assert {k.split("/drafts/")[1].split("/")[0] for k in keys(story.s3, BUCKET, f"{story.prefix}/drafts/")} == {"v1"}
    promotes = events_once(kube, ns, lambda ms: any(m.startswith("Promote:") for m in ms), "the Promote Event")
    assert len([m for m in promotes if m.startswith("Promote:")]) == 1
    assert trainer_jobs(kube, ns) == story.notes["jobs"]
    wait_for(lambda: condition(status(kube, ns), "Degraded").get("status") == "False", "Degraded=False",
             timeout_s=30)
    story.notes["pointer"] = pointer(story)
    row["nothing_lost"] = True


def test_etcd_restarted(kube, plane, story, row):
    """etcd restarted (same data directory)."""
    ns = story.namespace
    before = status(kube, ns)
    story.notes["etcd_down_s"] = faults.restart_etcd(plane)
    wait_plane_healthy(kube, plane)
    # The operator writes status again (the drift detector's averages move each pass).
    st = wait_for(lambda: (s := status(kube, ns)).get("controlState") != before.get("controlState") and s,
                  "a status write after the restart", timeout_s=60)
    assert wait_for(lambda: all_serve(kube, ns, "v1"), "both pods still serving v1", timeout_s=30)
    assert condition(st, "Ready").get("status") == "True"
    row["survived"] = True

    nothing_lost(kube, story, story.notes["pointer"], [("promote", "v1", story.notes["run"])], story.notes["jobs"])
    no_new_decisions(kube, ns)
    row["nothing_lost"] = True


def test_prometheus_restarted(kube, plane, story, row):
    """Prometheus restarted (down until the operator says so)."""
    ns = story.namespace

    def operator_noticed() -> None:
        wait_for(lambda: condition(status(kube, ns), "Degraded").get("reason") == "PrometheusUnreachable",
                 "Degraded/PrometheusUnreachable while Prometheus is down", timeout_s=60)

    story.notes["prometheus_down_s"] = faults.restart_prometheus(plane, while_down=operator_noticed)
    st = wait_for(lambda: (s := status(kube, ns)) and condition(s, "Degraded").get("status") == "False" and s,
                  "Degraded=False once Prometheus answers", timeout_s=90)
    assert st["speculation"]["enabled"] is True
    assert all_serve(kube, ns, "v1")
    row["survived"] = True

    nothing_lost(kube, story, story.notes["pointer"], [("promote", "v1", story.notes["run"])], story.notes["jobs"])
    no_new_decisions(kube, ns)
    row["nothing_lost"] = True


def test_node_lost(kube, plane, story, row):
    """node lost (pods evicted, back on another node of the class)."""
    ns, state_dir = story.namespace, Path(plane.state_dir)
    pods = serving_pods(kube, ns)
    lost = pods[0].spec.node_name
    pool = pools(kube, ns)[pods[0].metadata.name]
    siblings = [n.metadata.name for n in client.CoreV1Api(kube).list_node(
        label_selector=f"tide.dev/fake-node-pool={pool}").items if n.metadata.name != lost]
    assert siblings, f"the serving pods run on {lost}, the only node of pool {pool}: nowhere to come back"
    started = time.monotonic()
    faults.lose_node(state_dir, lost)
    try:
        def replaced():
            now = serving_pods(kube, ns)
            moved = len(now) == 2 and all(p.spec.node_name in siblings for p in now)
            return moved and all_serve(kube, ns, "v1")

        wait_for(replaced, f"both pods on {siblings} (pool {pool}), serving v1", timeout_s=150)
        story.notes["node_loss_recovered_s"] = time.monotonic() - started
        row["survived"] = True
    finally:
        faults.restore_node(state_dir, lost)
    wait_plane_healthy(kube, plane)
    evictions = client.CoreV1Api(kube).list_namespaced_event(ns, field_selector="reason=TaintManagerEviction").items
    assert evictions  # the controller-manager says why the pods went
    wait_for(lambda: all(p.metadata.deletion_timestamp is None for p in client.CoreV1Api(kube).list_namespaced_pod(
        ns, label_selector=SERVING).items) or None,
             "the evicted pods deleted once their node is back", timeout_s=60)
    st = wait_for(lambda: (s := status(kube, ns)) and (s.get("inferencePool") or {}).get("replicasReady") == 2 and s,
                  "status: 2 replicas ready", timeout_s=30)
    assert condition(st, "Ready").get("status") == "True"
    nothing_lost(kube, story, story.notes["pointer"], [("promote", "v1", story.notes["run"])], story.notes["jobs"])
    row["nothing_lost"] = True
