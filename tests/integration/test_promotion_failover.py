"""A leader killed mid-canary: the follower takes the Lease and the promotion completes exactly once.

Issue 18's HA scenario on the real plane: two operator replicas (one Lease), the promotion flow of
test_promotion.py (traffic shift -> capture -> real trainer Job -> canary on one pod), and SIGKILL of
the leader while the canary runs. The follower resumes from the TideDeployment's status: one
promotion in the registry's history, one Promote Event, v1 on every pod, never a v2.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.integration.kubewait import wait_for
from tests.integration.promotion_flow import (
    create,
    events,
    history,
    lifecycle,
    operator_config,
    patch_spec,
    pod_drafts,
    registry_prefix,
    run_id,
    scenario,
    seed_draft_files,
    spec,
    status,
    trained_job,
    upload,
)
from tests.integration.test_leader_election import LEASE, holder, leader_gauge
from tests.integration.test_promotion import drift_warm
from tide_e2e.operator_install import OperatorProcess, grant_leader_election_rbac, grant_operator_rbac, install_crd
from tide_operator.config import LeaderElectionConfig

pytestmark = pytest.mark.integration

GOOD, SHIFTED = 0.8, 0.5  # as test_promotion.py's drift_warm expects
DEFAULTS = LeaderElectionConfig()


def test_leader_killed_mid_canary_promotes_exactly_once(kube, namespace, plane, s3, s3_endpoint, tmp_path):
    install_crd(kube)
    grant_operator_rbac(kube)
    grant_leader_election_rbac(kube, namespace, LEASE)
    scenario_file = tmp_path / "scenario.yaml"
    acceptance = {"initial": {"general": GOOD, "legal": SHIFTED},
                  "r1": {"general": GOOD, "legal": GOOD}, "v1": {"general": GOOD, "legal": GOOD}}
    scenario_file.write_text(yaml.safe_dump(scenario("general", acceptance)))
    config = operator_config(scenario_file, tmp_path / "train")
    a = OperatorProcess(plane, config, lease=(namespace, LEASE), name=f"{namespace}-a").start()
    replicas = [a]
    try:
        wait_for(lambda: leader_gauge(a) == 1, "A leads")
        b = OperatorProcess(plane, config, lease=(namespace, LEASE), name=f"{namespace}-b").start()
        replicas.append(b)
        bucket = "tide-failover"
        s3.create_bucket(Bucket=bucket)
        upload(s3, bucket, "seed-draft", seed_draft_files(tmp_path / "seed"))
        create(kube, namespace, spec(bucket, s3_endpoint))
        r1 = run_id(kube, namespace)
        wait_for(lambda: drift_warm(kube, namespace), "speculation on, drift detector settled", timeout_s=120)

        # Traffic shifts (capture on first) -> collection -> trainer Job -> canary on one pod.
        patch_spec(kube, namespace, {"control": {"capture": {"enabled": True}}})
        scenario_file.write_text(yaml.safe_dump(scenario("legal", acceptance)))
        wait_for(lambda: trained_job(kube, plane, namespace), f"trainer Job chat-train-{r1} succeeded",
                 timeout_s=180)
        wait_for(lambda: lifecycle(status(kube, namespace)).get("phase") == "Canary", "lifecycle phase Canary",
                 timeout_s=90, interval_s=0.2)
        assert holder(kube, namespace).startswith(f"{a.name}_")
        prefix = registry_prefix(namespace)

        killed = time.monotonic()
        a.stop(kill=True)
        # Killed mid-canary: nothing promoted yet, so whatever promotes from now on is B (A is gone).
        assert sorted(pod_drafts(kube, namespace).values()) == sorted(["initial", r1])
        assert history(s3, bucket, prefix) == []
        wait_for(lambda: holder(kube, namespace).startswith(f"{b.name}_"), "B holds the Lease",
                 timeout_s=DEFAULTS.lease_duration_seconds + 2 * DEFAULTS.retry_period_seconds + 2, interval_s=0.2)
        print(f"\ntakeover mid-canary: {time.monotonic() - killed:.1f} s")

        wait_for(lambda: list(pod_drafts(kube, namespace).values()) == ["v1", "v1"], "v1 on every pod",
                 timeout_s=120)
        wait_for(lambda: lifecycle(status(kube, namespace)).get("last_promotion_at") is not None,
                 "the promotion in status", timeout_s=30)
        time.sleep(3 * 2)  # a few more passes (resync 2 s): a repeated promotion would show now
        assert [(e["action"], e["version"], e["run_id"]) for e in history(s3, bucket, prefix)] == \
            [("promote", "v1", r1)]
        pointer = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/promoted.json")["Body"].read())
        assert (pointer["version"], pointer["run_id"]) == ("v1", r1)
        assert not s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/drafts/v2/").get("Contents")
        promotes = [m for m in events(kube, namespace) if m.startswith("Promote:")]
        assert len(promotes) == 1, promotes
    finally:
        for process in replicas:
            process.stop()
