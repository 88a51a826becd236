"""The second layer of storage tenancy: a tenant's own credentials, bounded by the store's IAM.

With ``credentialsSecret`` a spec may name any bucket and prefix; the operator then acts with the
tenant's keys, never its own, so what those keys may touch is the store's policy. This runs the
operator's own S3 code paths (the registry it builds for a spec, the delete-on-delete) with tenant
A's keys aimed at tenant B's prefix, against a dedicated moto server in auth mode (IAM users with
prefix policies), and checks B's data is neither read, written nor deleted, and that a refused key of
``delete_objects`` is reported, not counted as deleted.

moto's auth mode enforces the user policies on GetObject, PutObject and DeleteObject per key; a
DeleteObjects request it authorises as s3:DeleteObject on the bucket and then checks each key against
the bucket policy only (a Deny for tenant A on B's prefix here; it answers 200 with a per-key
AccessDenied, as S3 does). It does not enforce ``s3:prefix`` conditions on ListBucket, nor
``s3:GetObject`` on a CopyObject source, nor principals in a bucket policy, and has no KMS key
policies: those are AWS's to enforce and are not proved here (docs/security.md).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tide_contracts.registry import CaptureLimits, CaptureObject, PruneIncomplete, RegistryError
from tide_operator.adapters.artifacts import ArtifactsUnreachable, delete_deployment_artifacts
from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.secret_cache import SECRETS
from tide_operator.api import parse_spec
from tide_operator.config import OperatorConfig, StorageConfig
from tide_operator.passes.control_step import make_registry

pytestmark = pytest.mark.integration

BUCKET = "tenancy-iam"
B_OBJECTS = ("team-b/chat/promoted.json", "team-b/chat/captures/pod-0/1.shard", "team-b/chat/drafts/v1/model.bin")
# The bucket and its policy, B's objects, per tenant: user, policy, attachment, access key.
SETUP_ACTIONS = 2 + len(B_OBJECTS) + 2 * 4


@dataclass(frozen=True)
class IamStore:
    url: str
    keys: dict[str, tuple[str, str]]  # tenant -> (access key id, secret)

    def client(self, tenant: str) -> Any:
        key, secret = self.keys[tenant]
        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1", aws_access_key_id=key,
                            aws_secret_access_key=secret)


def _prefix_policy(prefix: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
         "Resource": f"arn:aws:s3:::{BUCKET}/{prefix}/*"},
        # moto authorises DeleteObjects as s3:DeleteObject on the bucket, then each key against the
        # bucket policy only (AWS checks each key against both): the per-key denial is the bucket's.
        {"Effect": "Allow", "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{BUCKET}"},
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{BUCKET}",
         "Condition": {"StringLike": {"s3:prefix": f"{prefix}/*"}}}]})


def _setup(url: str) -> dict[str, tuple[str, str]]:
    """Exactly SETUP_ACTIONS requests, before moto starts checking signatures and policies."""
    admin = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "setup",
             "aws_secret_access_key": "setup"}
    s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": {"AWS": "arn:aws:iam::123456789012:user/tenant-a"},
         "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{BUCKET}/team-b/*"}]}))
    for key in B_OBJECTS:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"tenant B")
    keys = {}
    for tenant, prefix in (("a", "team-a"), ("b", "team-b")):
        iam.create_user(UserName=f"tenant-{tenant}")
        arn = iam.create_policy(PolicyName=f"tenant-{tenant}", PolicyDocument=_prefix_policy(prefix))["Policy"]["Arn"]
        iam.attach_user_policy(UserName=f"tenant-{tenant}", PolicyArn=arn)
        created = iam.create_access_key(UserName=f"tenant-{tenant}")["AccessKey"]
        keys[tenant] = (created["AccessKeyId"], created["SecretAccessKey"])
    return keys


@pytest.fixture(scope="module")
def store() -> Iterator[IamStore]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_ACTIONS)}
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        store = IamStore(url, _setup(url))
        # Auth is on from here: a key moto does not know is refused (else every check below is vacuous).
        unknown = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="nobody",
                               aws_secret_access_key="x")
        with pytest.raises(ClientError, match="InvalidAccessKeyId"):
            unknown.get_object(Bucket=BUCKET, Key=B_OBJECTS[0])
        yield store
    finally:
        server.terminate()
        server.wait(timeout=10)


class TenantSecrets:
    """The cluster as the operator's S3 code sees it: the namespace's credentials Secret."""

    def __init__(self, store: IamStore, tenant: str) -> None:
        key, secret = store.keys[tenant]
        self.data = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        return self.data


def _body(store: IamStore, prefix: str) -> dict[str, Any]:
    return {"metadata": {"name": "chat", "namespace": "team-a"}, "spec": {
        "target": {"model": "m", "revision": "r1"},
        "storage": {"s3": {"bucket": BUCKET, "prefix": prefix, "endpoint": store.url, "credentialsSecret": "a-creds",
                           "deleteArtifactsOnDelete": True}}}}


def _config(store: IamStore) -> OperatorConfig:
    return OperatorConfig(storage=StorageConfig(allowed_endpoints=(store.url,)))


def _b_data(store: IamStore) -> dict[str, bytes]:
    b = store.client("b")
    return {key: b.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in B_OBJECTS}


def test_tenant_a_keys_in_a_spec_aimed_at_b_read_write_and_delete_nothing_of_b(store: IamStore) -> None:
    body = _body(store, "team-b/chat")  # admitted by the operator: the spec brings its own credentials
    registry = make_registry("chat", "team-a", parse_spec(body["spec"]), TenantSecrets(store, "a"))  # type: ignore[arg-type]

    with pytest.raises(RegistryError, match="AccessDenied"):
        registry.promoted()  # read B's pointer
    with pytest.raises(RegistryError, match="AccessDenied"):
        registry.put_capture("pod-0/2.shard", b"from A", samples=1)  # write into B's buffer
    b_capture = CaptureObject("team-b/chat/captures/pod-0/1.shard", 8, 0.0, 1)
    with pytest.raises(PruneIncomplete, match="AccessDenied") as pruned:  # prune B's buffer
        registry.prune_captures(CaptureLimits(max_samples=0), datetime.now(UTC), captures=[b_capture])
    assert pruned.value.deleted == ()

    # Delete-on-delete with A's keys: S3 answers 200 with a per-key AccessDenied, reported as kept.
    with pytest.raises(ArtifactsUnreachable, match=r"partly kept \(0 deleted\).*AccessDenied"):
        delete_deployment_artifacts(body, TenantSecrets(store, "a"), _config(store))  # type: ignore[arg-type]

    assert _b_data(store) == dict.fromkeys(B_OBJECTS, b"tenant B")


def test_the_same_keys_work_under_their_own_prefix(store: IamStore) -> None:
    """The control: A's keys and the same code paths do read, write and delete under A's prefix."""
    body = _body(store, "team-a/chat")
    registry = make_registry("chat", "team-a", parse_spec(body["spec"]), TenantSecrets(store, "a"))  # type: ignore[arg-type]
    assert registry.promoted() == (None, None)
    key = registry.put_capture("pod-0/1.shard", b"from A", samples=1)
    assert [c.key for c in registry.list_captures()] == [key]
    assert delete_deployment_artifacts(body, TenantSecrets(store, "a"), _config(store)) == 1  # type: ignore[arg-type]
    assert _b_data(store) == dict.fromkeys(B_OBJECTS, b"tenant B")


class RotatingSecret:
    """The API server's side of a credentials Secret for the real Cluster adapter: reads are counted."""

    def __init__(self, data: dict[str, str]) -> None:
        self.data, self.reads = data, 0

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        self.reads += 1
        return {"metadata": {"name": name}, "data": {k: base64.b64encode(v.encode()).decode()
                                                     for k, v in self.data.items()}}


def test_a_key_the_store_refuses_is_read_again_from_its_secret(store: IamStore) -> None:
    """Issue 18: the Secret is read once and kept, never watched; S3 refusing its key (a rotation: the old
    key deleted, the Secret updated) makes the next pass read it again, and that pass works."""
    SECRETS.clear()
    secret = RotatingSecret({"AWS_ACCESS_KEY_ID": "deleted-key", "AWS_SECRET_ACCESS_KEY": "x"})
    cluster = Cluster(secrets=SECRETS)
    cluster.core = secret
    spec = parse_spec(_body(store, "team-a/chat")["spec"])
    try:
        registry = make_registry("chat", "team-a", spec, cluster)  # type: ignore[arg-type]
        secret.data = dict(zip(("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), store.keys["a"], strict=True))
        assert make_registry("chat", "team-a", spec, cluster)
        assert secret.reads == 1
        with pytest.raises(RegistryError, match="InvalidAccessKeyId"):
            registry.promoted()  # the old key, refused by the store

        rotated = make_registry("chat", "team-a", spec, cluster)  # type: ignore[arg-type]
        assert secret.reads == 2
        assert rotated.promoted() == (None, None)  # the new key works
        make_registry("chat", "team-a", spec, cluster)  # type: ignore[arg-type]
        assert secret.reads == 2  # and is kept again
    finally:
        SECRETS.clear()
