"""Server-Side Apply bookkeeping (issue 12 item 5): the hash, when to write, and migrating old managers."""

from __future__ import annotations

import copy

import pytest

from tide_operator.manifests.field_manager import (
    APPLIED_HASH_ANNOTATION,
    FIELD_MANAGER,
    apply_needed,
    migrated_managed_fields,
    with_applied_hash,
)

DESIRED = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "chat-vllm", "namespace": "team", "annotations": {"a": "1"}},
           "spec": {"replicas": 2, "template": {"spec": {"containers": [
               {"name": "vllm", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}}
APPLY_ENTRY = {"manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": "apps/v1", "fieldsV1": {"f:spec": {}}}
CONTROLLER = {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
              "fieldsV1": {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}}}


def live_of(body: dict, *entries: dict) -> dict:
    live = copy.deepcopy(body)
    live["metadata"].update(managedFields=list(entries), resourceVersion="7", uid="u")
    live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"  # server default
    return live


def test_the_hash_covers_the_object_and_drops_nones() -> None:
    body = with_applied_hash({**DESIRED, "spec": {**DESIRED["spec"], "paused": None}})
    assert "paused" not in body["spec"]
    assert body["metadata"]["annotations"]["a"] == "1"
    assert with_applied_hash(body) == body  # hashing an applied body again changes nothing
    fewer = copy.deepcopy(DESIRED)
    fewer["spec"]["template"]["spec"]["containers"][0]["env"].pop()
    assert (with_applied_hash(fewer)["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
            != body["metadata"]["annotations"][APPLIED_HASH_ANNOTATION])
    assert APPLIED_HASH_ANNOTATION not in DESIRED["metadata"]["annotations"]  # the input is not modified


def test_quantities_are_strings_in_the_apply_form() -> None:
    resources = {"limits": {"nvidia.com/gpu": 4, "memory": "8Gi"}, "requests": {"cpu": 2}}
    container = {"name": "vllm", "resources": resources}
    body = with_applied_hash({**DESIRED, "spec": {"template": {"spec": {
        "containers": [container], "volumes": [{"name": "shm", "emptyDir": {"sizeLimit": 1, "medium": "Memory"}}]}}}})
    spec = body["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "4", "memory": "8Gi"},
                                                  "requests": {"cpu": "2"}}
    assert spec["volumes"][0]["emptyDir"] == {"sizeLimit": "1", "medium": "Memory"}


def removed_env() -> dict:
    fewer = copy.deepcopy(DESIRED)
    fewer["spec"]["template"]["spec"]["containers"][0]["env"].pop()
    return fewer


def hand_edited() -> dict:
    live = live_of(with_applied_hash(DESIRED), APPLY_ENTRY)
    live["spec"]["replicas"] = 5
    return live


@pytest.mark.parametrize(("desired", "live", "why"), [
    (DESIRED, live_of(with_applied_hash(DESIRED), APPLY_ENTRY, CONTROLLER), []),  # steady state: no write
    (removed_env(), live_of(with_applied_hash(DESIRED), APPLY_ENTRY),  # a removal: only the hash shows it
     [".metadata.annotations.tide.dev/applied-hash", ".spec.template.spec.containers[0].env"]),
    (DESIRED, hand_edited(), [".spec.replicas"]),  # the operator owns replicas: drift is repaired
    (DESIRED, live_of(with_applied_hash(DESIRED)), ["managedFields (not yet applied by this manager)"]),
])
def test_apply_is_needed_only_when_something_differs(desired: dict, live: dict, why: list[str]) -> None:
    assert apply_needed(with_applied_hash(desired), live) == why


OLD = {"manager": "OpenAPI-Generator", "operation": "Update", "apiVersion": "apps/v1", "time": "2026-01-01T00:00:00Z",
       "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
           'k:{"name":"vllm"}': {"f:env": {'k:{"name":"B"}': {".": {}, "f:value": {}}}}}}}}}}
OLD_PATCH = {**OLD, "time": "2026-02-01T00:00:00Z", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {
    "f:spec": {"f:containers": {'k:{"name":"vllm"}': {"f:env": {'k:{"name":"A"}': {".": {}}}}}}}}}}
OURS_ON_CREATE = {**OLD, "manager": FIELD_MANAGER, "fieldsV1": {"f:metadata": {"f:labels": {}}}}


def test_old_manager_entries_fold_into_one_apply_entry() -> None:
    migrated = migrated_managed_fields(live_of(DESIRED, OLD, CONTROLLER, OLD_PATCH, OURS_ON_CREATE))
    assert migrated is not None
    applied, *rest = migrated
    assert rest == [CONTROLLER]  # another controller's fields stay its own
    assert (applied["manager"], applied["operation"], applied["apiVersion"]) == (FIELD_MANAGER, "Apply", "apps/v1")
    assert applied["time"] == "2026-02-01T00:00:00Z"
    containers = applied["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert set(containers['k:{"name":"vllm"}']["f:env"]) == {'k:{"name":"A"}', 'k:{"name":"B"}'}
    assert "f:replicas" in applied["fieldsV1"]["f:spec"]
    assert "f:labels" in applied["fieldsV1"]["f:metadata"]


@pytest.mark.parametrize("entries", [
    (APPLY_ENTRY, OLD),  # already applied once: a later Update by that client is someone's hand edit
    (CONTROLLER,),
    ({**OLD, "apiVersion": "extensions/v1beta1"},),  # another version's field set: not ours to translate
    (),
])
def test_nothing_to_migrate(entries: tuple[dict, ...]) -> None:
    assert migrated_managed_fields(live_of(DESIRED, *entries)) is None
