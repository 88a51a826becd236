"""Pods that cannot switch speculation live (launched without the plugin's scheduler) are rolled.

The operator runs the simulator without --scheduler-cls, so every pod answers 409 restart_required.
At a load where speculation loses, the operator must roll the pods once with vLLM's launch table at
K=0 everywhere, remember it on the Deployment, say so (status and a Warning Event) and then hold:
no second roll while the decision stands.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.integration.kubewait import events_where, wait_for
from tests.integration.promotion_flow import sim_operator_config
from tests.integration.test_control_loop import condition, create, scenario, spec, status
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_operator.manifests.serving import LAUNCH_BANDS_ANNOTATION, OFF_BANDS

pytestmark = pytest.mark.integration

OFF = json.dumps([list(band) for band in OFF_BANDS])


@pytest.fixture(scope="module")
def high_load(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(256)))  # verify cost makes speculation lose at once
    return path


@pytest.fixture(scope="module")
def operator(plane, kube, high_load):
    install_crd(kube)
    grant_operator_rbac(kube)
    process = OperatorProcess(plane, sim_operator_config(high_load, schedulerCls=None)).start()
    yield process
    process.stop()


def test_pods_without_a_runtime_switch_are_rolled_once_with_speculation_off(kube, namespace, operator, s3,
                                                                           s3_endpoint):
    s3.create_bucket(Bucket="tide-roll")
    create(kube, namespace, spec("tide-roll", s3_endpoint))
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)

    def rolled_off():
        found = apps.list_namespaced_deployment(namespace, field_selector="metadata.name=chat-vllm").items
        if not found:
            return None  # the operator has not created it yet
        deployment = found[0]
        return deployment if (deployment.metadata.annotations or {}).get(LAUNCH_BANDS_ANNOTATION) == OFF else None

    deployment = wait_for(rolled_off, "the Deployment rolled with speculation off", timeout_s=180)
    args = deployment.spec.template.spec.containers[0].args
    speculative = json.loads(args[args.index("--speculative-config") + 1])
    assert speculative["num_speculative_tokens_per_batch_size"] == json.loads(OFF)
    assert "--scheduler-cls" not in args

    st = wait_for(lambda: (s := status(kube, namespace)).get("speculation", {}).get("enabled") is False and s,
                  "status says speculation off", timeout_s=60)
    assert condition(st, "SpeculationEnabled")["message"].endswith("pods rolled (no runtime switch)")
    events = events_where(kube, namespace, lambda es: any(e.reason == "PodsRolledForSpeculation" for e in es),
                          "the PodsRolledForSpeculation Event", selector="involvedObject.name=chat")
    rolls = [e for e in events if e.reason == "PodsRolledForSpeculation"]
    assert [e.type for e in rolls] == ["Warning"]
    assert "restart_required" in rolls[0].message

    # The new pods come up with K=0 everywhere, and the decision holds: no second roll.
    generation = deployment.metadata.generation
    time.sleep(15)
    assert apps.read_namespaced_deployment("chat-vllm", namespace).metadata.generation == generation
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=chat").items
    assert sum(e.count or 1 for e in events if e.reason == "PodsRolledForSpeculation") == 1
