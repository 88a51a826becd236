"""Every Kubernetes call the operator makes carries a request timeout: an API server that stops answering
fails the pass (retried) instead of holding a worker thread without end. Watches are excepted."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tide_operator.adapters import cluster as cluster_module
from tide_operator.adapters.cluster import Cluster
from tide_operator.config import KubernetesConfig


class Recorder:
    def __init__(self) -> None:
        self.timeouts: list[Any] = []

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        self.timeouts.append(kwargs.get("_request_timeout"))
        missing = ApiException(status=404, reason="not found")
        missing.body = b"{}"  # the client decodes an error's body
        raise missing


@pytest.fixture
def recorded() -> Any:
    made = Cluster(request_timeout=(5.0, 30.0))
    recorder = Recorder()
    made.api.rest_client.request = recorder.request  # type: ignore[method-assign]
    return made, recorder


def test_reads_writes_and_policy_paths_carry_the_timeout(recorded: Any) -> None:
    made, recorder = recorded
    assert made.deployment("team", "chat") is None
    with pytest.raises(ApiException):
        made.pods("team", "a=b")
    with pytest.raises(ApiException):
        made._policy_call("GET", "/apis/policy/v1/namespaces/team/poddisruptionbudgets/x")
    assert recorder.timeouts == [(5.0, 30.0)] * 3


def test_a_call_that_sets_its_own_timeout_keeps_it_and_a_watch_gets_none(recorded: Any) -> None:
    made, recorder = recorded
    with pytest.raises(ApiException):
        made.core.list_namespaced_pod("team", _request_timeout=2)
    with pytest.raises(ApiException):
        made.core.list_namespaced_pod("team", watch=True)
    assert recorder.timeouts == [2, None]


def test_the_default_comes_from_the_operator_configuration() -> None:
    cluster_module.set_request_timeout(KubernetesConfig(connect_timeout_seconds=3, read_timeout_seconds=12))
    try:
        made = Cluster()
        recorder = Recorder()
        made.api.rest_client.request = recorder.request  # type: ignore[method-assign]
        made.secret_exists("team", "s")
        assert recorder.timeouts == [(3.0, 12.0)]
    finally:
        cluster_module.set_request_timeout(KubernetesConfig())
    assert (KubernetesConfig().connect_timeout_seconds, KubernetesConfig().read_timeout_seconds) == (5, 30)
