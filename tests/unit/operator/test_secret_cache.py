"""Referenced Secrets are read once and kept: re-read when refused, aged out, or missing (issue 18)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from tide_operator.adapters.s3_clients import S3ClientCache
from tide_operator.adapters.secret_cache import SecretCache


def _data(**values: str) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Api:
    """The API server's answers, counted; None: the Secret does not exist."""

    def __init__(self, data: dict[str, str] | None) -> None:
        self.data, self.reads = data, 0

    def __call__(self) -> dict[str, str] | None:
        self.reads += 1
        return self.data


def test_a_secret_is_read_once_then_kept_until_it_ages_out() -> None:
    clock, api = Clock(), Api(_data(token="old"))
    cache = SecretCache(max_age_s=300, clock=clock)
    assert cache.get("team-a", "creds", api) == _data(token="old")
    api.data = _data(token="new")  # rotated, and nothing tells the cache
    clock.now = 299
    assert cache.get("team-a", "creds", api) == _data(token="old")
    assert api.reads == 1
    clock.now = 300
    assert cache.get("team-a", "creds", api) == _data(token="new")
    assert api.reads == 2


def test_a_missing_secret_is_not_kept() -> None:
    api = Api(None)
    cache = SecretCache(clock=Clock())
    assert cache.get("team-a", "creds", api) is None
    api.data = _data(token="t")  # the user creates it: the next pass uses it
    assert cache.get("team-a", "creds", api) == _data(token="t")
    assert api.reads == 2


def test_a_deleted_secret_is_seen_once_its_entry_ages_out() -> None:
    clock, api = Clock(), Api(_data(token="t"))
    cache = SecretCache(max_age_s=60, clock=clock)
    cache.get("team-a", "creds", api)
    api.data, clock.now = None, 60
    assert cache.get("team-a", "creds", api) is None
    assert len(cache) == 0


def test_zero_max_age_reads_on_every_call() -> None:
    api = Api(_data(token="t"))
    cache = SecretCache(max_age_s=0, clock=Clock())
    for _ in range(3):
        cache.get("team-a", "creds", api)
    assert api.reads == 3


def test_entries_are_per_namespace() -> None:
    a, b = Api(_data(token="a")), Api(_data(token="b"))
    cache = SecretCache(clock=Clock())
    assert cache.get("team-a", "creds", a) == _data(token="a")
    assert cache.get("team-b", "creds", b) == _data(token="b")  # never team-a's entry


def test_a_refused_value_drops_every_secret_holding_it_and_only_those() -> None:
    cache = SecretCache(clock=Clock())
    cache.get("team-a", "s3", Api(_data(AWS_ACCESS_KEY_ID="AKIAOLD", AWS_SECRET_ACCESS_KEY="s")))
    cache.get("team-a", "prom", Api(_data(token="t0k\n")))  # used stripped, as prometheus_access does
    cache.get("team-b", "s3", Api(_data(AWS_ACCESS_KEY_ID="AKIAB", AWS_SECRET_ACCESS_KEY="s")))
    assert cache.forget_holding(["AKIAOLD"]) == 1
    assert cache.forget_holding(["t0k"]) == 1
    assert cache.forget_holding(["", "unknown"]) == 0
    again = Api(_data(AWS_ACCESS_KEY_ID="AKIANEW", AWS_SECRET_ACCESS_KEY="s"))
    assert cache.get("team-a", "s3", again) == again.data
    assert again.reads == 1
    kept = Api(None)
    assert cache.get("team-b", "s3", kept) == _data(AWS_ACCESS_KEY_ID="AKIAB", AWS_SECRET_ACCESS_KEY="s")
    assert kept.reads == 0


def test_expired_entries_leave_memory() -> None:
    clock = Clock()
    cache = SecretCache(max_age_s=10, clock=clock)
    cache.get("team-a", "gone", Api(_data(token="t")))  # its TideDeployment was deleted: never read again
    clock.now = 11
    cache.get("team-a", "other", Api(_data(token="u")))
    assert len(cache) == 1


def _refusing_client(clients: S3ClientCache, key_id: str, status: int, code: str) -> Any:
    client = clients.client(None, "us-east-1", {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": "s"})
    stub = Stubber(client)
    stub.add_client_error("head_bucket", code, http_status_code=status)
    stub.activate()
    return client


def test_an_s3_refusal_reports_the_access_key_and_other_errors_do_not() -> None:
    reported: list[tuple[str, ...]] = []
    clients = S3ClientCache(on_refused=lambda keys: reported.append(tuple(keys)))
    for key_id, status, code in (("AKIA403", 403, "InvalidAccessKeyId"), ("AKIA401", 401, "Unauthorized"),
                                 ("AKIA404", 404, "NoSuchBucket"), ("AKIA500", 500, "InternalError")):
        with pytest.raises(ClientError, match=code):
            _refusing_client(clients, key_id, status, code).head_bucket(Bucket="b")
    assert reported == [("AKIA403",), ("AKIA401",)]
