"""High availability on the real control plane: operator replicas elect one leader through a Lease.

Three real operator processes, one after another, under the same user (as two pods share a
ServiceAccount) and told apart by User-Agent in the apiserver's audit log:
- A leads, B waits: every write of the run is A's, B only gets the Lease; the gauges say 1 and 0.
- SIGKILL A: B takes over within the lease duration plus a retry period and reconciles a change.
- SIGTERM B with C waiting: B releases the Lease, C takes over at once (no lease duration to wait).
- someone else writes the Lease under C: C exits non-zero at its next renewal, acting no more.
- SIGTERM to a waiting follower D: it exits 0 at once and leaves the Lease as it is.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from kubernetes import client

from tests.integration.kubewait import wait_for
from tide_e2e.operator_install import OperatorProcess, grant_leader_election_rbac, grant_operator_rbac, install_crd
from tide_localcluster.audit import WRITE_VERBS, AuditLog
from tide_localcluster.plane import OPERATOR_USER
from tide_operator.api import GROUP, PLURAL, VERSION
from tide_operator.config import LeaderElectionConfig

pytestmark = pytest.mark.integration

LEASE = "tide-ha"
DEFAULTS = LeaderElectionConfig()  # the timings the chart ships: 15 s lease, 10 s renew deadline, 2 s retry
SPEC = {
    "target": {"model": "meta-llama/Llama-3.1-8B", "revision": "0e9e39f", "servedModelName": "chat"},
    "draft": {"method": "eagle3", "initial": "s3://drafts/base", "numSpeculativeTokens": 3},
    "inference": {"replicas": 1, "gpusPerReplica": 1},
    "storage": {"s3": {"bucket": "tide", "credentialsSecret": "s3-creds"}},
}


def holder(kube, namespace: str) -> str:
    try:
        lease = client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return ""
        raise
    return lease.spec.holder_identity or ""


def leader_gauge(process: OperatorProcess) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=2) as response:
        text = response.read().decode()
    match = re.search(r"^tide_operator_leader (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def replica(plane, namespace: str, name: str) -> OperatorProcess:
    return OperatorProcess(plane, lease=(namespace, LEASE), name=f"{namespace}-{name}").start()


def agent_of(process: OperatorProcess) -> str:
    return f"({process.name}_"  # tide-operator/<version> (<HOSTNAME>_<random>)


def writes_of(audit: AuditLog, process: OperatorProcess, since: int) -> list[str]:
    return [str(call) for agent, calls in audit.calls_by_agent(OPERATOR_USER, since).items()
            if agent_of(process) in agent for call in calls if call.verb in WRITE_VERBS]


def takeover_s(kube, namespace: str, successor: OperatorProcess, since: float, timeout_s: float) -> float:
    wait_for(lambda: holder(kube, namespace).startswith(f"{successor.name}_"),
             f"{successor.name} holds the Lease", timeout_s=timeout_s, interval_s=0.1)
    return time.monotonic() - since


def test_one_leader_acts_and_a_follower_takes_over(plane, kube, namespace):
    install_crd(kube)
    grant_operator_rbac(kube)
    grant_leader_election_rbac(kube, namespace, LEASE)
    client.CoreV1Api(kube).create_namespaced_secret(namespace, {
        "metadata": {"name": "s3-creds"}, "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}})
    audit = AuditLog(plane.audit_log)
    mark = audit.mark()
    a = replica(plane, namespace, "a")
    replicas = [a]
    try:
        wait_for(lambda: leader_gauge(a) == 1, "A leads")
        b = replica(plane, namespace, "b")
        replicas.append(b)
        assert holder(kube, namespace).startswith(f"{a.name}_")
        assert leader_gauge(b) == 0

        # Only the leader writes: B, alive all along, writes nothing (the plane audits this user's writes), and
        # every write carries A's User-Agent: Kopf's session, the handlers' clients and the Lease's alike.
        custom = client.CustomObjectsApi(kube)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": "chat"},
            "spec": SPEC})
        wait_for(lambda: (custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
                          .get("status") or {}).get("phase"), "status written", timeout_s=60)
        time.sleep(2 * DEFAULTS.retry_period_seconds)  # more passes (resync 2 s), renewals and lease looks
        by_agent = audit.calls_by_agent(OPERATOR_USER, mark)
        assert [agent for agent in by_agent if agent_of(a) not in agent and agent_of(b) not in agent] == []
        # The follower only looks at the Lease (the plane audits this user's gets too).
        assert {(call.verb, call.resource, call.name) for agent, calls in by_agent.items() if agent_of(b) in agent
                for call in calls} <= {("get", "leases", LEASE)}
        a_writes = {(call.resource, call.verb) for agent, calls in by_agent.items() if agent_of(a) in agent
                    for call in calls}
        assert {("leases", "create"), ("leases", "update"), ("deployments", "create"),
                ("tidedeployments/status", "patch")} <= a_writes
        assert "TideDeployment" not in b.log.read_text()

        # SIGKILL the leader: nothing releases the Lease; B waits out its duration, then acts.
        killed = time.monotonic()
        a.stop(kill=True)
        limit = DEFAULTS.lease_duration_seconds + 2 * DEFAULTS.retry_period_seconds + 2
        took = takeover_s(kube, namespace, b, killed, timeout_s=limit)
        print(f"\ntakeover after SIGKILL: {took:.1f} s (lease {DEFAULTS.lease_duration_seconds} s)")
        assert took <= limit
        wait_for(lambda: leader_gauge(b) == 1, "B's gauge says leader")
        mark = audit.mark()
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat",
                                              {"spec": {"inference": {"replicas": 2}}})
        wait_for(lambda: client.AppsV1Api(kube).read_namespaced_deployment("chat-vllm", namespace).spec.replicas == 2,
                 "B reconciled the change", timeout_s=30)
        assert any("deployments" in w for w in writes_of(audit, b, mark))

        # SIGTERM the leader: it releases the Lease after Kopf stops; C takes over at once.
        c = replica(plane, namespace, "c")
        replicas.append(c)
        assert leader_gauge(c) == 0
        terminated = time.monotonic()
        b.stop()
        assert b.process is not None
        assert b.process.returncode == 0
        took = takeover_s(kube, namespace, c, terminated, timeout_s=DEFAULTS.lease_duration_seconds)
        print(f"takeover after SIGTERM: {took:.1f} s")
        # Released, not expired: B wrote the empty holder itself (Kopf's shutdown first, so a busy CI
        # machine may take a few seconds; without a release C would wait out the full lease).
        released = [line for line in b.log.read_text().splitlines() if "released lease" in line]
        assert len(released) == 1
        assert "already taken over" not in released[0]
        assert took < DEFAULTS.lease_duration_seconds
        wait_for(lambda: leader_gauge(c) == 1, "C's gauge says leader")

        # Another holder in the Lease: C has lost it and exits non-zero within a renewal or two.
        coordination = client.CoordinationV1Api(kube)
        lease = coordination.read_namespaced_lease(LEASE, namespace)
        lease.spec.holder_identity = "intruder"
        coordination.replace_namespaced_lease(LEASE, namespace, lease)
        assert c.process is not None
        c.process.wait(timeout=3 * DEFAULTS.retry_period_seconds + 5)
        assert c.process.returncode == 1
        assert "lost the lease" in c.log.read_text()

        # A follower stopped while it waits exits at once and leaves the Lease alone.
        d = replica(plane, namespace, "d")
        replicas.append(d)
        assert leader_gauge(d) == 0
        stopped = time.monotonic()
        d.stop()
        assert d.process is not None
        assert d.process.returncode == 0
        assert time.monotonic() - stopped < 5
        assert holder(kube, namespace) == "intruder"
    finally:
        for process in replicas:
            process.stop()

