"""Storage tenancy (issue 13, item 1): the operator's identity is lent only to its own buckets and the
derived prefix; custom bucket, prefix, endpoint or KMS key need the tenant's credentials; endpoints
are allowlisted; a refused spec is Invalid naming the field and reaches neither the cluster nor S3."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tide_operator.adapters.artifacts import ArtifactsUnreachable, delete_deployment_artifacts
from tide_operator.api import parse_spec
from tide_operator.config import OperatorConfig, StorageConfig, load_operator_config
from tide_operator.control.storage_tenancy import endpoint_allowed, storage_violations, with_storage_defaults
from tide_operator.reconcile import reconcile

MOTO = "http://127.0.0.1:5000"
STORAGE = StorageConfig(buckets=("tide",), endpoint=MOTO, allowed_endpoints=("https://minio.team-a:9000",))
CONFIG = OperatorConfig(storage=STORAGE)
BASE: dict[str, Any] = {"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}}}
S3 = "spec.storage.s3"
KMS = {"control": {"capture": {"serverSideEncryption": "aws:kms", "kmsKeyId": "arn:aws:kms:us-east-1:1:key/b"}}}


def _spec(s3: dict[str, Any] | None = None, **sections: Any) -> Any:
    raw = copy.deepcopy(BASE)
    raw["storage"]["s3"].update(s3 or {})
    raw.update(copy.deepcopy(sections))
    return parse_spec(raw)


@pytest.mark.parametrize(("s3", "sections", "refused"), [
    ({}, {}, []),
    ({"prefix": "llm/chat"}, {}, []),  # the derived prefix, spelled out
    ({"prefix": "/llm/chat/"}, {}, []),
    ({"endpoint": MOTO}, {}, []),  # the operator's own endpoint, spelled out
    ({"bucket": "team-b-private"}, {}, [f"{S3}.bucket"]),
    ({"prefix": "llm-b/chat"}, {}, [f"{S3}.prefix"]),  # another tenant's data in the lent bucket
    ({"prefix": "llm"}, {}, [f"{S3}.prefix"]),  # a parent of every deployment of the namespace
    ({"endpoint": "http://127.0.0.1:6000"}, {}, [f"{S3}.endpoint"]),
    ({"endpoint": "https://minio.team-a:9000"}, {}, [f"{S3}.endpoint"]),  # allowlisted, but not lent
    ({"deleteArtifactsOnDelete": True, "prefix": "llm-b/chat"}, {}, [f"{S3}.prefix"]),
    ({}, KMS, ["spec.control.capture.kmsKeyId"]),
    ({"bucket": "x-bucket", "prefix": "a/b", "endpoint": "http://evil:1"}, {},
     [f"{S3}.bucket", f"{S3}.prefix", f"{S3}.endpoint"]),
])
def test_the_operators_identity_is_lent_only_to_its_buckets_and_the_derived_prefix(s3, sections, refused):
    assert [field for field, _ in storage_violations(_spec(s3, **sections), "llm", "chat", STORAGE)] == refused


@pytest.mark.parametrize(("s3", "sections", "refused"), [
    ({"bucket": "team-b", "prefix": "anything", "credentialsSecret": "creds"}, KMS, []),
    ({"credentialsSecret": "creds", "endpoint": "https://minio.team-a:9000"}, {}, []),
    ({"credentialsSecret": "creds", "endpoint": MOTO}, {}, []),
    ({"credentialsSecret": "creds", "endpoint": "http://169.254.169.254"}, {}, [f"{S3}.endpoint"]),
    ({"credentialsSecret": "creds", "endpoint": "https://minio.team-a:9001"}, {}, [f"{S3}.endpoint"]),
    ({"credentialsSecret": "creds", "endpoint": "https://minio.team-a:9000/other"}, {}, [f"{S3}.endpoint"]),
])
def test_own_credentials_choose_bucket_prefix_and_key_but_endpoints_stay_allowlisted(s3, sections, refused):
    assert [field for field, _ in storage_violations(_spec(s3, **sections), "llm", "chat", STORAGE)] == refused


def test_by_default_no_bucket_is_lent():
    (problem,) = storage_violations(_spec(), "llm", "chat", StorageConfig())
    assert problem[0] == f"{S3}.bucket"
    assert "credentialsSecret" in problem[1]


@pytest.mark.parametrize(("endpoint", "allowed", "ok"), [
    ("http://127.0.0.1:5000", ("http://127.0.0.1",), True),  # no port in the entry: every port
    ("http://127.0.0.1:5000", ("http://127.0.0.1:5000",), True),
    ("http://127.0.0.1:5001", ("http://127.0.0.1:5000",), False),
    ("https://127.0.0.1:5000", ("http://127.0.0.1",), False),
    ("http://127.0.0.1.evil.example:5000", ("http://127.0.0.1",), False),
    ("http://user@127.0.0.1:5000", ("http://127.0.0.1",), True),
    ("http://127.0.0.1:notaport", ("http://127.0.0.1",), False),
])
def test_endpoint_allowlist_compares_scheme_host_and_port(endpoint, allowed, ok):
    assert endpoint_allowed(endpoint, allowed) is ok


def test_the_operators_endpoint_fills_in_a_spec_without_one():
    assert with_storage_defaults(_spec(), STORAGE).storage.s3.endpoint == MOTO
    own = _spec({"credentialsSecret": "c", "endpoint": "https://minio.team-a:9000"})
    assert with_storage_defaults(own, STORAGE) is own
    assert with_storage_defaults(_spec(), StorageConfig()).storage.s3.endpoint is None


def test_chart_values_spell_the_storage_config_in_camel_case():
    config = load_operator_config({"storage": {"buckets": ["tide"], "allowedEndpoints": ["http://127.0.0.1"]}})
    assert config.storage == StorageConfig(buckets=("tide",), allowed_endpoints=("http://127.0.0.1",))


class UntouchedCluster:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the pass touched cluster.{name}")


def test_a_refused_storage_spec_is_invalid_with_a_warning_and_touches_nothing():
    raw = copy.deepcopy(BASE)
    raw["storage"]["s3"].update(prefix="llm-b/chat", endpoint="http://10.0.0.1:9000")
    body = {"metadata": {"name": "chat", "namespace": "llm", "generation": 2}, "spec": raw}
    result = reconcile(body, UntouchedCluster(), CONFIG, adopt=lambda child: child)  # type: ignore[arg-type]
    assert result.status["phase"] == "Invalid"
    ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "StoragePolicyViolation")
    assert ready["message"].startswith(f"{S3}.prefix: 'llm-b/chat' needs the deployment's own credentialsSecret")
    assert ready["message"].endswith(f"also refused: {S3}.endpoint")
    (event,) = result.events
    assert (event.type, event.reason) == ("Warning", "StoragePolicyViolation")
    assert result.applied == ()


def test_deleting_a_refused_spec_deletes_nothing_and_names_the_field():
    raw = copy.deepcopy(BASE)
    raw["storage"]["s3"].update(prefix="llm-b/chat", deleteArtifactsOnDelete=True)
    body = {"metadata": {"name": "chat", "namespace": "llm"}, "spec": raw}
    with pytest.raises(ArtifactsUnreachable, match=r"kept: spec\.storage\.s3\.prefix"):
        delete_deployment_artifacts(body, UntouchedCluster(), CONFIG)  # type: ignore[arg-type]
