"""A referenced Secret (S3 or Prometheus credentials) is read once per pass: the existence check and
the credentials come from the same GET. Without the process's Secret cache the next pass (a new
Cluster) reads it afresh; with it (the operator's handlers) the next pass reads memory."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.secret_cache import SecretCache


class Secrets:
    def __init__(self, data: dict[str, str] | None) -> None:
        self.data, self.gets = data, 0

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        self.gets += 1
        if self.data is None:
            raise ApiException(status=404, reason="Not Found")
        return {"metadata": {"name": name}, "data": {k: base64.b64encode(v.encode()).decode()
                                                     for k, v in self.data.items()}}


def cluster_reading(secrets: Secrets, cache: SecretCache | None = None) -> Cluster:
    made = Cluster(request_timeout=(5.0, 30.0), secrets=cache)
    made.core = secrets  # type: ignore[assignment]
    return made


def test_the_existence_check_and_the_credentials_share_one_get() -> None:
    secrets = Secrets({"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "one"})
    pass_one = cluster_reading(secrets)
    assert pass_one.secret_exists("team", "creds")
    assert pass_one.secret_data("team", "creds")["AWS_SECRET_ACCESS_KEY"] == "one"
    assert pass_one.secret_data("team", "creds")["AWS_ACCESS_KEY_ID"] == "AKIA1"
    assert secrets.gets == 1
    secrets.data = {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "two"}  # rotated between passes
    assert cluster_reading(secrets).secret_data("team", "creds")["AWS_SECRET_ACCESS_KEY"] == "two"
    assert secrets.gets == 2


def test_a_missing_secret_is_missing_for_both_and_read_once() -> None:
    secrets = Secrets(None)
    made = cluster_reading(secrets)
    assert not made.secret_exists("team", "creds")
    with pytest.raises(ApiException) as missing:
        made.secret_data("team", "creds")
    assert (missing.value.status, secrets.gets) == (404, 1)


def test_with_the_process_cache_the_next_pass_reads_memory_until_refused() -> None:
    secrets, cache = Secrets({"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "one"}), SecretCache()
    for _ in range(3):  # three passes
        made = cluster_reading(secrets, cache)
        assert made.secret_exists("team", "creds")
        assert made.secret_data("team", "creds")["AWS_SECRET_ACCESS_KEY"] == "one"
    assert secrets.gets == 1
    secrets.data = {"AWS_ACCESS_KEY_ID": "AKIA2", "AWS_SECRET_ACCESS_KEY": "two"}
    cache.forget_holding(["AKIA1"])  # S3 refused the old key (s3_clients.py)
    assert cluster_reading(secrets, cache).secret_data("team", "creds")["AWS_ACCESS_KEY_ID"] == "AKIA2"
    assert secrets.gets == 2


def test_with_the_process_cache_a_missing_secret_is_read_again_next_pass() -> None:
    secrets, cache = Secrets(None), SecretCache()
    assert not cluster_reading(secrets, cache).secret_exists("team", "creds")
    secrets.data = {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "one"}  # created by the user
    assert cluster_reading(secrets, cache).secret_exists("team", "creds")
    assert secrets.gets == 2
