"""Issue 12 items 4 and 5 on the real control plane: the operator never touches an object named
like a child that it does not own, and Server-Side Apply removes what the spec no longer asks for,
also on a child written the old way (Update by the client's default manager).
"""

from __future__ import annotations

import copy
import time

import pytest
from kubernetes import client

from tests.integration.kubewait import wait_for
from tests.integration.test_operator import SPEC, condition, create_secret, get_td, ready_td, tide
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_operator.api import GROUP, PLURAL, VERSION
from tide_operator.control.lifecycle import run_id_for
from tide_operator.manifests import names

pytestmark = pytest.mark.integration
POD = {"metadata": {"labels": {"app": "squatter"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture(scope="module")
def operator(plane, kube):
    install_crd(kube)
    grant_operator_rbac(kube)
    process = OperatorProcess(plane).start()
    yield process
    process.stop()


def squat(kube, namespace: str, job: str) -> dict[tuple[str, str], str]:
    """Objects named like the children of TideDeployment `chat` (its next trainer Job is `job`), made by
    someone else; their resourceVersions."""
    apps, core, batch = client.AppsV1Api(kube), client.CoreV1Api(kube), client.BatchV1Api(kube)
    apps.create_namespaced_deployment(namespace, {"metadata": {"name": "chat-vllm"}, "spec": {
        "replicas": 0, "selector": {"matchLabels": {"app": "squatter"}}, "template": POD}})
    core.create_namespaced_service(namespace, {"metadata": {"name": "chat-vllm"}, "spec": {
        "selector": {"app": "squatter"}, "ports": [{"port": 80}]}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "chat-control"}, "stringData": {"token": "mine"}})
    batch.create_namespaced_job(namespace, {"metadata": {"name": job}, "spec": {
        "parallelism": 0, "template": {**POD, "spec": {**POD["spec"], "restartPolicy": "Never"}}}})
    read = {("Deployment", "chat-vllm"): lambda: apps.read_namespaced_deployment("chat-vllm", namespace),
            ("Service", "chat-vllm"): lambda: core.read_namespaced_service("chat-vllm", namespace),
            ("Secret", "chat-control"): lambda: core.read_namespaced_secret("chat-control", namespace),
            ("Job", job): lambda: batch.read_namespaced_job(job, namespace)}

    def versions() -> dict[tuple[str, str], str]:
        return {key: get().metadata.resource_version for key, get in read.items()}

    def settled() -> dict | None:  # the controllers write the new objects' status once
        before = versions()
        time.sleep(1)
        return before if versions() == before else None

    return {"now": versions, "settled": wait_for(settled, "the squatters' status to settle", timeout_s=20)}


def test_children_named_by_someone_else_are_refused_and_left_untouched(kube, namespace, operator):
    # Run ids hash the TideDeployment's UID: the squatter of its first trainer Job needs the UID, so the
    # TideDeployment is made first, with the operator stopped (no pass runs before the squatters exist).
    operator.stop()
    try:
        create_secret(kube, namespace)
        td = client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                           tide("chat", SPEC))
        job = names.trainer_job_name("chat", run_id_for(1, td["metadata"]["uid"]))
        squatted = squat(kube, namespace, job)
    finally:
        operator.start()
    before = squatted["settled"]

    def conflicted():
        degraded = condition(get_td(kube, namespace, "chat"), "Degraded")
        return degraded if degraded and degraded["reason"] == "ChildConflict" else None

    degraded = wait_for(conflicted, "Degraded=True ChildConflict")
    assert degraded["status"] == "True"
    for kind, name in before:
        assert f"{kind} {name} exists with no owner" in degraded["message"]
    core = client.CoreV1Api(kube)
    # Kopf posts Events from a background queue: the Warning may land after the status does.
    wait_for(lambda: any(e.reason == "ChildConflict" and "Deployment chat-vllm" in e.message
                         for e in core.list_namespaced_event(namespace, field_selector="type=Warning").items),
             "the ChildConflict Warning Event", timeout_s=30)

    time.sleep(5)  # a few resyncs later: nothing was patched, adopted or created
    assert squatted["now"]() == before
    assert not core.list_namespaced_config_map(namespace, label_selector="tide.dev/deployment=chat").items
    assert not core.list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
    print(f"children refused: {len(before)}/{len(before)} ({', '.join(f'{k} {n}' for k, n in before)})")

    # Once the names are free the operator makes its own children and the conflict clears.
    apps, batch = client.AppsV1Api(kube), client.BatchV1Api(kube)
    apps.delete_namespaced_deployment("chat-vllm", namespace)
    core.delete_namespaced_service("chat-vllm", namespace)
    core.delete_namespaced_secret("chat-control", namespace)
    batch.delete_namespaced_job(job, namespace, propagation_policy="Background")
    td = wait_for(lambda: ready_td(kube, namespace, "chat"), "Ready once the names are free", timeout_s=90)
    assert condition(td, "Degraded")["reason"] != "ChildConflict"  # (this spec's S3 is not there: other reasons)
    assert apps.read_namespaced_deployment("chat-vllm", namespace).metadata.owner_references[0].uid == \
        td["metadata"]["uid"]


def env_names(kube, namespace: str) -> set[str]:
    deployment = client.AppsV1Api(kube).read_namespaced_deployment("chat-vllm", namespace)
    return {e.name for e in deployment.spec.template.spec.containers[0].env or []}


def with_env(name: str) -> dict:
    spec = copy.deepcopy(SPEC)
    spec["inference"]["podTemplateOverride"] = {"spec": {"containers": [
        {"name": "vllm", "env": [{"name": name, "value": "1"}]}]}}
    return spec


def replace_spec(kube, namespace: str, spec: dict) -> None:
    objects = client.CustomObjectsApi(kube)
    objects.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat",
                                             {**get_td(kube, namespace, "chat"), "spec": spec})


def apply_td(kube, namespace: str, spec: dict) -> dict:
    create_secret(kube, namespace)
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                  tide("chat", spec))
    return wait_for(lambda: ready_td(kube, namespace, "chat"), "Ready", timeout_s=90)


def test_an_override_removed_from_the_spec_leaves_the_pod_template(kube, namespace, operator):
    apply_td(kube, namespace, with_env("EXTRA_FLAG"))
    assert "EXTRA_FLAG" in env_names(kube, namespace)

    replace_spec(kube, namespace, copy.deepcopy(SPEC))
    wait_for(lambda: "EXTRA_FLAG" not in env_names(kube, namespace), "the removed env var to leave the template")
    managers = {(m.manager, m.operation) for m in
                client.AppsV1Api(kube).read_namespaced_deployment("chat-vllm", namespace).metadata.managed_fields}
    assert ("tide-operator", "Apply") in managers


def test_a_child_written_before_server_side_apply_is_migrated_and_removal_works(kube, namespace, operator):
    apply_td(kube, namespace, with_env("LEGACY_FLAG"))
    apps = client.AppsV1Api(kube)
    operator.stop()
    # What the previous operator left: every field owned by an Update of the client's default
    # manager, and no applied-hash annotation.
    live = apps.read_namespaced_deployment("chat-vllm", namespace)
    legacy = [client.ApiClient().sanitize_for_serialization(m) for m in live.metadata.managed_fields]
    for entry in legacy:
        if entry["manager"] == "tide-operator":
            entry.update(manager="OpenAPI-Generator", operation="Update")
    apps.patch_namespaced_deployment("chat-vllm", namespace, [
        {"op": "replace", "path": "/metadata/managedFields", "value": legacy},
        {"op": "remove", "path": "/metadata/annotations/tide.dev~1applied-hash"}],
        _content_type="application/json-patch+json")
    managers = {m.manager for m in apps.read_namespaced_deployment("chat-vllm", namespace).metadata.managed_fields}
    assert "tide-operator" not in managers
    replace_spec(kube, namespace, copy.deepcopy(SPEC))  # the override goes while no operator runs

    operator.start()
    wait_for(lambda: "LEGACY_FLAG" not in env_names(kube, namespace), "the old manager's env var to leave")
    entries = apps.read_namespaced_deployment("chat-vllm", namespace).metadata.managed_fields
    assert ("tide-operator", "Apply") in {(m.manager, m.operation) for m in entries}
    assert not [m for m in entries if m.manager == "OpenAPI-Generator" and "f:template" in str(m.fields_v1)]
