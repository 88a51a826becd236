"""Two tenants, one operator, one S3 (issue 13, item 1): tenant A cannot read, write or delete under
tenant B's prefix through any spec field, and the operator's own identity is lent to nothing but the
configured bucket and the derived prefix ``<namespace>/<name>/``.

Layer proved: the operator's own refusal. Every S3 request the operator (and the pods) sends goes
through a recording proxy in front of moto (tests/integration/s3_recorder.py); the test reads that
record. A spec with its own credentials is bounded by the store's IAM, not by the operator: that
layer is test_storage_iam.py (moto's auth mode on a dedicated server).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.kubewait import events_where, wait_for
from tests.integration.s3_recorder import S3Recorder
from tide_e2e.operator_install import TEST_OPERATOR_CONFIG, OperatorProcess, grant_operator_rbac, install_crd
from tide_operator.api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

SHARED, B_PRIVATE = "tenancy-shared", "tenancy-b"
OPERATOR_KEY = "operator-ambient"  # the operator's own identity (IRSA, an instance role in a cluster)
TENANT_KEYS = {"a-creds": "tenant-a", "b-creds": "tenant-b"}
SPEC: dict[str, Any] = {
    "target": {"model": "meta-llama/Llama-3.1-8B", "revision": "0e9e39f"},
    "inference": {"replicas": 1},
    "storage": {"s3": {"bucket": SHARED}},
}
S3_FIELD = "spec.storage.s3"


@pytest.fixture(scope="module")
def recorder(s3_endpoint: str) -> Iterator[S3Recorder]:
    with S3Recorder(s3_endpoint) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def operator(plane, kube, recorder: S3Recorder) -> Iterator[OperatorProcess]:
    install_crd(kube)
    grant_operator_rbac(kube)
    config = {**TEST_OPERATOR_CONFIG,
              "storage": {"buckets": [SHARED], "endpoint": recorder.url, "allowedEndpoints": [recorder.url]}}
    with pytest.MonkeyPatch.context() as env:  # the operator's ambient identity, inherited by its process
        for key, value in {"AWS_ACCESS_KEY_ID": OPERATOR_KEY, "AWS_SECRET_ACCESS_KEY": "x",
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
            env.setenv(key, value)
        process = OperatorProcess(plane, config).start()
    yield process
    process.stop()


@pytest.fixture
def tenant_b(kube) -> Iterator[str]:
    core = client.CoreV1Api(kube)
    name = f"tenant-b-{int(time.time() * 1000) % 10**8}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


def _secret(kube, namespace: str, name: str) -> None:
    client.CoreV1Api(kube).create_namespaced_secret(namespace, {"metadata": {"name": name}, "stringData": {
        "AWS_ACCESS_KEY_ID": TENANT_KEYS[name], "AWS_SECRET_ACCESS_KEY": "x"}})


def _apply(kube, namespace: str, name: str, s3: dict[str, Any], **sections: Any) -> None:
    spec = copy.deepcopy(SPEC)
    spec["storage"]["s3"].update(s3)
    spec.update(copy.deepcopy(sections))
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": name}, "spec": spec})


def _status(kube, namespace: str, name: str) -> dict[str, Any]:
    td = client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return td.get("status") or {}


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})


def _keys(s3, bucket: str, prefix: str = "") -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])}


# (TideDeployment in A's namespace, spec.storage.s3 fields, other sections, the field refused).
# B's prefix is written with "{b}" for B's namespace.
ATTACKS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("prefix", {"prefix": "{b}/chat", "deleteArtifactsOnDelete": True}, {}, f"{S3_FIELD}.prefix"),
    ("bucket", {"bucket": B_PRIVATE, "deleteArtifactsOnDelete": True}, {}, f"{S3_FIELD}.bucket"),
    ("endpoint", {"endpoint": "{moto}"}, {}, f"{S3_FIELD}.endpoint"),  # around the operator's endpoint
    ("kms", {}, {"control": {"capture": {"serverSideEncryption": "aws:kms", "kmsKeyId": "arn:aws:kms:b"}}},
     "spec.control.capture.kmsKeyId"),
    # With its own credentials a tenant chooses bucket and prefix, never an endpoint off the allowlist.
    ("own-creds-endpoint", {"credentialsSecret": "a-creds", "endpoint": "{moto}", "prefix": "{b}/chat"}, {},
     f"{S3_FIELD}.endpoint"),
]


def test_tenant_a_reaches_nothing_of_tenant_b_through_any_storage_field(
        kube, namespace, tenant_b, operator, recorder, s3, s3_endpoint):
    a, b = namespace, tenant_b
    for bucket in (SHARED, B_PRIVATE):
        if bucket not in {x["Name"] for x in s3.list_buckets()["Buckets"]}:
            s3.create_bucket(Bucket=bucket)
    b_data = {(SHARED, f"{b}/chat/{k}") for k in ("captures/pod-0/1.shard", "promoted.json", "drafts/v1/model.bin")}
    b_data |= {(B_PRIVATE, "chat/captures/pod-0/1.shard")}
    for bucket, key in b_data:  # written directly to moto, not through the recorder
        s3.put_object(Bucket=bucket, Key=key, Body=b"tenant B")
    s3.put_object(Bucket=SHARED, Key=f"{a}/own/captures/pod-0/1.shard", Body=b"tenant A")
    for secret in TENANT_KEYS:
        _secret(kube, a if secret == "a-creds" else b, secret)
    started = len(recorder.snapshot())

    # A's own deployment under the operator's identity: admitted, serving, its data deletable.
    _apply(kube, a, "own", {"deleteArtifactsOnDelete": True})
    for name, s3_fields, sections, _ in ATTACKS:
        filled = {k: v.format(b=b, moto=s3_endpoint) if isinstance(v, str) else v for k, v in s3_fields.items()}
        _apply(kube, a, name, filled, **sections)

    wait_for(lambda: _status(kube, a, "own").get("phase") == "Serving" or None, "A's own deployment Serving", 90)
    refused = 0
    for name, _, _, field in ATTACKS:
        status = wait_for(lambda n=name: ((s := _status(kube, a, n)).get("phase") == "Invalid" and s) or None,
                          f"{name} Invalid")
        ready = _ready(status)
        assert ready["reason"] == "StoragePolicyViolation", (name, ready)
        assert ready["message"].startswith(f"{field}:"), (name, ready["message"])
        refused += 1
    attacked = {name for name, *_ in ATTACKS}
    events_where(kube, a, lambda ws: {e.involved_object.name for e in ws if e.reason == "StoragePolicyViolation"}
                 == attacked, "a StoragePolicyViolation Warning for exactly each attack", selector="type=Warning")
    deployments = {d.metadata.name for d in client.AppsV1Api(kube).list_namespaced_deployment(a).items}
    assert deployments == {"own-vllm"}  # a refused spec got no pods (so no pod env, no pod S3 access)

    # Delete everything of A's, the refused deployments that asked for deleteArtifactsOnDelete included.
    objects = client.CustomObjectsApi(kube)
    for name in ("own", *(n for n, *_ in ATTACKS)):
        objects.delete_namespaced_custom_object(GROUP, VERSION, a, PLURAL, name)
    wait_for(lambda: not objects.list_namespaced_custom_object(GROUP, VERSION, a, PLURAL)["items"] or None,
             "A's TideDeployments gone", 180)  # the delete handler retries before it gives up on a refused spec

    # B's data is all there; A's own data was deleted under A's prefix only.
    assert {(bucket, key) for bucket in (SHARED, B_PRIVATE) for key in _keys(s3, bucket, "" if bucket == B_PRIVATE
                                                                           else f"{b}/")} == b_data
    assert _keys(s3, SHARED, f"{a}/") == set()
    warnings = events_where(kube, a, lambda ws: {"prefix", "bucket"} <= {e.involved_object.name for e in ws
                                                                          if e.reason == "ArtifactsKept"},
                            "the ArtifactsKept Warnings of prefix and bucket", selector="type=Warning")
    kept = {e.involved_object.name: e.message for e in warnings if e.reason == "ArtifactsKept"}
    assert kept["prefix"].startswith(f"S3 artifacts kept: {S3_FIELD}.prefix")

    # The record: no request of any kind reached B's bucket or B's prefix, none listed the whole bucket,
    # and every request in the shared bucket stayed under A's own deployment's prefix.
    requests = recorder.snapshot()[started:]
    assert requests, "the recorder saw no request: the test would prove nothing"
    assert [r for r in requests if r.bucket == B_PRIVATE] == []
    outside = [r for r in requests if r.bucket == SHARED and any(not n.startswith(f"{a}/own/") for n in r.names())]
    assert outside == []
    deletes = [r for r in requests if r.deleted_keys]
    assert {k for r in deletes for k in r.deleted_keys} == {f"{a}/own/captures/pod-0/1.shard"}
    print(f"storage attacks refused: {refused}/{len(ATTACKS)}; {len(requests)} S3 requests recorded, "
          f"none under s3://{B_PRIVATE}/ or s3://{SHARED}/{b}/")
