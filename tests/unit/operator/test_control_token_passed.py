"""The control pass calls the pods with the token Secret the reconcile pass just applied: no second read
of that Secret, and a rotation (tide.dev/rotate-token) reaches the pod calls in the same pass."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from test_every_accepted_spec_runs import FakeCluster

from tide_operator import reconcile as reconcile_module
from tide_operator.adapters.prometheus_adapter import PrometheusAdapters
from tide_operator.config import OperatorConfig, StorageConfig
from tide_operator.manifests import names
from tide_operator.manifests.control_token import ROTATE_ANNOTATION
from tide_operator.manifests.serving import CONTROL_AUTH_KEY
from tide_operator.passes.control_step import make_fleet

CONFIG = OperatorConfig(storage=StorageConfig(buckets=("tide",)))


class TokenCluster(FakeCluster):
    """The control token Secret exists with ``old``; reading it as a Secret's data is a second read."""

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if (kind, name) == ("Secret", names.control_token_secret_name("chat")):
            return {"metadata": {"name": name, "namespace": namespace, "annotations": {},
                                 "ownerReferences": [{"uid": "uid-1", "kind": "TideDeployment", "name": "chat"}]},
                    "data": {CONTROL_AUTH_KEY: base64.b64encode(b"old").decode()}}
        return super().read(kind, namespace, name)

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        raise AssertionError(f"Secret {name} read again")

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []


def test_a_rotation_reaches_the_pod_calls_in_the_pass_that_rotates(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: dict[str, Any] = {}
    monkeypatch.setattr(reconcile_module, "run_control", lambda *a, **kw: handed.update(kw))
    body = {"metadata": {"name": "chat", "namespace": "ns", "uid": "uid-1", "generation": 1,
                         "annotations": {ROTATE_ANNOTATION: "2026-12-05"}},
            "spec": {"target": {"model": "m", "revision": "r1"}, "draft": {"initial": "/drafts/launch"},
                     "inference": {"replicas": 1}, "storage": {"s3": {"bucket": "tide"}}}}
    cluster = TokenCluster(CONFIG, replicas=1)
    result = reconcile_module.reconcile(body, cluster, CONFIG, adopt=lambda c: c,  # type: ignore[arg-type]
                               adapters=PrometheusAdapters(), now=datetime(2026, 12, 5, tzinfo=UTC))
    assert handed, result.status
    new, previous = handed["control_tokens"]
    assert (len(new) > 20, previous) == (True, "old")  # the new token first, the old one as the fallback
    applied = next(c for c in cluster.applied if c["kind"] == "Secret")
    assert base64.b64decode(applied["data"][CONTROL_AUTH_KEY]).decode() == new

    fleet = make_fleet("chat", "ns", CONFIG, cluster, handed["control_tokens"])  # type: ignore[arg-type]
    assert (fleet.token, fleet.previous_token) == (new, "old")
