"""Degraded names the dependency that failed: a Kubernetes API refusal is not blamed on S3."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tide_operator.api import parse_spec
from tide_operator.api.conditions import Reason
from tide_operator.control import actions as act
from tide_operator.passes.control_loop import EffectError
from tide_operator.passes.effects import ClusterEffects


class RefusingCluster:
    def delete_owned_job(self, namespace: str, name: str, owner_uid: str) -> None:
        raise ApiException(status=403, reason="Forbidden")


def effects(cluster: Any) -> ClusterEffects:
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}}})
    return ClusterEffects("chat", "ns", spec, None, None, cluster, None, None,  # type: ignore[arg-type]
                          lambda child: child)


def test_an_api_refusal_while_cancelling_training_is_a_kubernetes_api_error() -> None:
    with pytest.raises(EffectError) as failed:
        effects(RefusingCluster()).cancel_training(act.CancelTraining("r3", "WorkloadShift", "stale"))
    assert failed.value.reason == Reason.KUBERNETES_API_ERROR
    assert "r3" in str(failed.value)
    assert "Forbidden" in str(failed.value)
