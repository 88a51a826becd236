"""The operator against the real control plane: children on the right GPUs, validation that loses
nothing, drift repair, zero writes on a no-op pass, and cleanup on delete.

The operator runs as a separate process under its own user with the least-privilege ClusterRole
from ``tide_operator.rbac``; the apiserver's audit log counts its writes. vLLM pods run the
stand-in server (same command line and routes) as processes on the fake H100 nodes.
"""

from __future__ import annotations

import copy
import time
import urllib.parse

import pytest
from kubernetes import client

from tests.integration.kubewait import events_where, wait_for
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_localcluster.audit import AuditLog
from tide_localcluster.plane import OPERATOR_USER
from tide_operator.api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

SPEC = {
    "target": {"model": "meta-llama/Llama-3.1-8B", "revision": "0e9e39f", "servedModelName": "chat"},
    "draft": {"method": "eagle3", "initial": "s3://drafts/base", "numSpeculativeTokens": 3},
    "inference": {"replicas": 2, "gpusPerReplica": 4},
    "training": {"gpusPerJob": 2},
    "storage": {"s3": {"bucket": "tide", "credentialsSecret": "s3-creds"}},
}


@pytest.fixture(scope="module")
def operator(plane, kube):
    install_crd(kube)
    grant_operator_rbac(kube)
    process = OperatorProcess(plane).start()
    yield process
    process.stop()


def tide(name: str, spec: dict) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": name},
            "spec": copy.deepcopy(spec)}


def create_secret(kube, namespace: str) -> None:
    client.CoreV1Api(kube).create_namespaced_secret(namespace, {
        "metadata": {"name": "s3-creds"}, "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}})


def get_td(kube, namespace: str, name: str) -> dict:
    return client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def condition(td: dict, kind: str) -> dict | None:
    return next((c for c in (td.get("status") or {}).get("conditions", []) if c["type"] == kind), None)


def read_budget(kube, namespace: str, name: str) -> dict:
    return kube.call_api(f"/apis/policy/v1beta1/namespaces/{namespace}/poddisruptionbudgets/{name}", "GET",
                         header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                         response_types_map={200: "object"}, _return_http_data_only=True)


def ready_td(kube, namespace: str, name: str) -> dict | None:
    td = get_td(kube, namespace, name)
    ready = condition(td, "Ready")
    return td if ready and ready["status"] == "True" else None


def apply_td(kube, namespace: str, name: str = "chat", spec: dict = SPEC) -> dict:
    create_secret(kube, namespace)
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, tide(name, spec))
    return wait_for(lambda: ready_td(kube, namespace, name), f"TideDeployment {name} Ready", timeout_s=90)


def test_apply_runs_vllm_on_h100_nodes_with_service_and_config(kube, namespace, operator):
    td = apply_td(kube, namespace)
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)

    status = td["status"]
    assert status["phase"] == "Serving"
    assert status["inferencePool"]["gpuClass"] == "H100"
    assert status["trainingPool"]["gpuClass"] == "MI250"  # a different, cheaper class trains
    assert status["observedGeneration"] == td["metadata"]["generation"]
    assert status["replicas"] == 2
    assert condition(td, "Scheduled")["status"] == "True"

    deployment = apps.read_namespaced_deployment("chat-vllm", namespace)
    assert deployment.metadata.owner_references[0].kind == "TideDeployment"
    pods = core.list_namespaced_pod(namespace, label_selector=status["selector"]).items
    assert len(pods) == 2
    assert {p.spec.node_name for p in pods} <= {"h100-0", "h100-1"}
    # Restricted Pod Security profile, as the API server stored it.
    security = pods[0].spec.security_context
    assert (security.run_as_non_root, security.seccomp_profile.type) == (True, "RuntimeDefault")
    container_security = pods[0].spec.containers[0].security_context
    assert (container_security.allow_privilege_escalation, container_security.capabilities.drop) == (False, ["ALL"])
    assert pods[0].spec.automount_service_account_token is False
    args = pods[0].spec.containers[0].args
    assert args[args.index("--served-model-name") + 1] == "chat"
    assert '"method":"eagle3"' in args[args.index("--speculative-config") + 1]
    assert core.read_namespaced_service("chat-vllm", namespace).spec.ports[0].name == "http"
    assert core.list_namespaced_config_map(namespace, label_selector="tide.dev/deployment=chat").items

    events_where(kube, namespace, lambda es: any(e.reason == "ReplicasReady" for e in es),
                 "the ReplicasReady Event", selector="involvedObject.name=chat")
    # The serving pods' PodDisruptionBudget, in the only policy version a v1.20 API server serves.
    budget = read_budget(kube, namespace, "chat-vllm")
    assert budget["apiVersion"] == "policy/v1beta1"
    assert budget["metadata"]["ownerReferences"][0]["kind"] == "TideDeployment"
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/component": "inference",
                                                         "tide.dev/deployment": "chat"}

    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as r:
        exported = r.read().decode()
    assert "tide_operator_reconcile_duration_seconds_count" in exported
    assert f'tide_operator_phase{{phase="Serving",tide_deployment="chat",tide_namespace="{namespace}"}} 1.0' in exported


def test_more_replicas_than_free_gpus_are_created_and_wait_for_capacity(kube, namespace, operator):
    # 3 replicas of 8 GPUs, 16 on the plane's two H100 nodes: the Deployment is created all the same,
    # one pod at least waits Pending (an autoscaler would see it), and the status says what is missing.
    spec = copy.deepcopy(SPEC)
    spec["inference"].update(replicas=3, gpusPerReplica=8)
    create_secret(kube, namespace)
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                  tide("chat", spec))
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)

    def waiting():
        scheduled = condition(get_td(kube, namespace, "chat"), "Scheduled")
        return scheduled if scheduled and scheduled["reason"] == "WaitingForCapacity" else None

    scheduled = wait_for(waiting, "Scheduled=False WaitingForCapacity")
    assert scheduled["status"] == "False"
    assert "need 3 x 8 GPUs on single nodes of H200, H100, A100, L40S" in scheduled["message"]
    assert apps.read_namespaced_deployment("chat-vllm", namespace).spec.replicas == 3

    def unschedulable():
        pods = core.list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
        pending = [p for p in pods if any(c.type == "PodScheduled" and c.status == "False"
                                          and c.reason == "Unschedulable" for c in p.status.conditions or ())]
        return pending if len(pods) == 3 and pending else None

    pending = wait_for(unschedulable, "a serving pod Pending for want of GPUs")
    terms = pending[0].spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    required = {t.match_expressions[0].values[0] for t in terms.node_selector_terms}
    assert required >= {"NVIDIA-H200", "NVIDIA-A100-SXM4-80GB"}  # every NVIDIA class of the catalog
    td = get_td(kube, namespace, "chat")
    assert td["status"]["phase"] in ("Pending", "Serving")  # never Invalid, and nothing Degraded
    assert (condition(td, "Degraded") or {}).get("status") != "True"
    assert read_budget(kube, namespace, "chat-vllm")["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(("patch", "field"), [
    ({"inference": {"gpuClasses": ["TPU-v5"]}}, "spec.inference.gpuClasses"),
    ({"inference": {"extraArgs": ["--served-model-name", "x"]}}, "spec.inference.extraArgs"),
    ({"storage": {"s3": {"credentialsSecret": "absent"}}}, "spec.storage.s3.credentialsSecret"),
    ({"target": {"tensorParallelSize": 3}}, "spec.target.tensorParallelSize"),
    # The pod policy (issue 12): escalations are refused the same way, before anything changes.
    ({"inference": {"podTemplateOverride": {"spec": {"hostNetwork": True}}}},
     "spec.inference.podTemplateOverride.spec.hostNetwork"),
    ({"inference": {"image": "docker.io/someone/vllm:latest"}}, "spec.inference.image"),
])
def test_invalid_spec_names_the_field_changes_no_child_and_recovers(kube, namespace, operator, patch, field):
    apply_td(kube, namespace)
    apps, objects = client.AppsV1Api(kube), client.CustomObjectsApi(kube)
    before = apps.read_namespaced_deployment("chat-vllm", namespace).metadata.resource_version

    objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat", {"spec": patch})

    def invalid():
        td = get_td(kube, namespace, "chat")
        return td if td.get("status", {}).get("phase") == "Invalid" else None

    td = wait_for(invalid, "phase Invalid")
    ready = condition(td, "Ready")
    assert ready["status"] == "False"
    assert field in ready["message"]
    events_where(kube, namespace, lambda ws: any(field in e.message for e in ws),
                 f"a Warning Event naming {field}", selector="type=Warning")
    time.sleep(3)  # a resync or two later, the running children are exactly as they were
    assert apps.read_namespaced_deployment("chat-vllm", namespace).metadata.resource_version == before

    objects.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat",
                                             {**get_td(kube, namespace, "chat"), "spec": copy.deepcopy(SPEC)})
    wait_for(lambda: ready_td(kube, namespace, "chat"), "recovery to Ready after the fix")


def test_drift_is_repaired(kube, namespace, operator):
    apply_td(kube, namespace)
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)

    core.delete_namespaced_service("chat-vllm", namespace)
    wait_for(lambda: core.list_namespaced_service(namespace, field_selector="metadata.name=chat-vllm").items,
             "the deleted Service to come back")

    deployment = apps.read_namespaced_deployment("chat-vllm", namespace)
    args = deployment.spec.template.spec.containers[0].args
    hand_edited = [*args[:-1], "tampered"]
    apps.patch_namespaced_deployment("chat-vllm", namespace, {"spec": {"template": {"spec": {"containers": [
        {"name": deployment.spec.template.spec.containers[0].name, "args": hand_edited}]}}}})
    wait_for(lambda: apps.read_namespaced_deployment("chat-vllm", namespace).spec.template.spec.containers[0].args
             == args, "the hand-edited container args to be restored")


def test_an_unchanged_object_costs_zero_writes_and_zero_lists_per_pass(kube, namespace, operator, plane):
    apply_td(kube, namespace)
    audit = AuditLog(plane.audit_log)
    # Let the rollout settle (status flips are legitimate writes), then watch several resyncs.
    wait_for(lambda: (td := ready_td(kube, namespace, "chat")) and td["status"]["replicas"] == 2 and td,
             "steady state")
    time.sleep(3)
    mark = audit.mark()
    time.sleep(8)  # four resync intervals of 2 s
    writes = [w for w in audit.writes(OPERATOR_USER, since=mark) if w.namespace == namespace]
    assert writes == [], [str(w) for w in writes]
    # Pods, nodes and Jobs come from watch caches (watch_cache.py): a pass lists nothing, in any namespace.
    lists = [c for c in audit.calls(OPERATOR_USER, since=mark) if c.verb == "list"]
    assert lists == [], [str(c) for c in lists]


def test_the_operator_is_never_sent_the_clusters_other_pods(kube, namespace, operator, plane):
    """Kopf's pod and Job watches select our label; placement's watch takes only pods bound to a node and not
    finished (gpu_request_watch.py): a cluster's Pending backlog never reaches the operator's memory."""
    apply_td(kube, namespace)
    wait_for(lambda: ready_td(kube, namespace, "chat"), "Ready")
    lists = [c for c in AuditLog(plane.audit_log).calls(OPERATOR_USER) if c.verb == "list"
             and c.resource in ("pods", "jobs") and not c.namespace]
    assert {c.resource for c in lists} == {"pods", "jobs"}, [c.uri for c in lists]
    query = [urllib.parse.parse_qs(urllib.parse.urlsplit(c.uri).query) for c in lists]
    unselected = [c.uri for c, q in zip(lists, query, strict=True)
                  if q.get("labelSelector") != ["tide.dev/deployment"]
                  and "spec.nodeName!=" not in q.get("fieldSelector", [""])[0].split(",")]
    assert unselected == []


def test_deleting_the_tide_deployment_removes_its_children(kube, namespace, operator):
    # No S3 data to delete here (the spec's bucket is on AWS, unreachable from the plane): garbage
    # collection alone; the finalizer's deletes are test_s3_artifacts_are_kept_unless_the_spec_opts_in.
    spec = copy.deepcopy(SPEC)
    spec["storage"]["s3"]["deleteCapturesOnDelete"] = False
    apply_td(kube, namespace, spec=spec)
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    client.CustomObjectsApi(kube).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")

    wait_for(lambda: not apps.list_namespaced_deployment(namespace).items or None, "Deployment garbage-collected")
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
             or None, "vLLM pods gone")
    assert not core.list_namespaced_service(namespace).items
    assert core.read_namespaced_secret("s3-creds", namespace)  # what the user made is left alone


def test_scale_subresource_drives_the_vllm_replicas(kube, namespace, operator):
    apply_td(kube, namespace)
    objects, apps = client.CustomObjectsApi(kube), client.AppsV1Api(kube)
    objects.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "chat", {"spec": {"replicas": 3}})

    wait_for(lambda: apps.read_namespaced_deployment("chat-vllm", namespace).spec.replicas == 3,
             "Deployment replicas to follow the scale subresource")
    scale = wait_for(lambda: (s := objects.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL,
                                                                               "chat"))["status"].get("replicas") == 3
                     and s, "scale status replicas=3", timeout_s=90)
    assert scale["status"]["selector"] == "app.kubernetes.io/component=inference,tide.dev/deployment=chat"


def test_an_operator_restart_resumes_without_duplicates(kube, namespace, operator):
    apply_td(kube, namespace)
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    before = {d.metadata.uid for d in apps.list_namespaced_deployment(namespace).items}

    operator.stop(kill=True)  # no graceful shutdown: as if the node died
    operator.start()
    time.sleep(6)  # resume handlers and a few resyncs

    assert {d.metadata.uid for d in apps.list_namespaced_deployment(namespace).items} == before
    assert len(core.list_namespaced_service(namespace).items) == 1
    assert len(core.list_namespaced_config_map(namespace, label_selector="tide.dev/deployment=chat").items) == 1
    assert ready_td(kube, namespace, "chat") is not None


@pytest.mark.parametrize("opt_in", [False, True])
def test_s3_artifacts_are_kept_unless_the_spec_opts_in_to_deletion(kube, namespace, operator, s3, s3_endpoint,
                                                                      opt_in):
    bucket = f"tide-{namespace[-5:]}-{int(opt_in)}"
    s3.create_bucket(Bucket=bucket)
    spec = copy.deepcopy(SPEC)
    spec["storage"]["s3"].update(bucket=bucket, endpoint=s3_endpoint, deleteArtifactsOnDelete=opt_in)
    apply_td(kube, namespace, spec=spec)
    for key in ("drafts/v1/model.safetensors", "promoted.json", "captures/shard-0.safetensors"):
        s3.put_object(Bucket=bucket, Key=f"{namespace}/chat/{key}", Body=b"x")
    s3.put_object(Bucket=bucket, Key="other-team/keep.json", Body=b"x")

    client.CustomObjectsApi(kube).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
    wait_for(lambda: not client.CustomObjectsApi(kube).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"] or None, "the TideDeployment to be gone")

    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert "other-team/keep.json" in keys  # never anything outside the deployment's prefix
    ours = {k.removeprefix(f"{namespace}/chat/") for k in keys if k.startswith(f"{namespace}/chat/")}
    # Captures are tenant data and go either way (deleteCapturesOnDelete defaults to true); drafts only on opt-in,
    # and the draft pool's index with them (written when a control pass recorded the launch draft before the delete).
    if opt_in:
        assert ours == set()
    else:
        assert ours - {"pool.json"} == {"drafts/v1/model.safetensors", "promoted.json"}
