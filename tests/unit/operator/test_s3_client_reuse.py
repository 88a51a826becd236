"""The control pass reuses one boto3 S3 client per endpoint, region and credential set: a new client per
pass was a new connection pool (and TLS handshake) per deployment per interval. A rotated key is a new
credential set, so a new client; the raw secret key is never what a client is kept under."""

from __future__ import annotations

from typing import Any

import pytest

from tide_operator.adapters.s3_clients import CLIENTS, S3ClientCache
from tide_operator.api import parse_spec
from tide_operator.passes.control_step import make_registry


class Secrets:
    def __init__(self, key_id: str, secret: str) -> None:
        self.data = {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
        self.reads = 0

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        self.reads += 1
        return dict(self.data)


def spec(endpoint: str = "http://s3.team-a:9000") -> Any:
    return parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {
        "bucket": "tide", "endpoint": endpoint, "credentialsSecret": "creds"}}})


@pytest.fixture(autouse=True)
def empty() -> Any:
    CLIENTS.clear()
    yield
    CLIENTS.clear()


def test_passes_with_the_same_credentials_share_one_client() -> None:
    secrets = Secrets("AKIA1", "s3cr3t-one")
    first = make_registry("chat", "team-a", spec(), secrets)  # type: ignore[arg-type]
    second = make_registry("chat", "team-a", spec(), secrets)  # type: ignore[arg-type]
    other_deployment = make_registry("chat2", "team-a", spec(), secrets)  # type: ignore[arg-type]
    assert first.client is second.client is other_deployment.client
    assert first.prefix != other_deployment.prefix  # the registry (bucket, prefix, caches) stays per deployment


def test_a_rotated_key_or_another_endpoint_gets_its_own_client() -> None:
    secrets = Secrets("AKIA1", "s3cr3t-one")
    before = make_registry("chat", "team-a", spec(), secrets).client  # type: ignore[arg-type]
    secrets.data["AWS_SECRET_ACCESS_KEY"] = "s3cr3t-two"  # same key id, new secret
    rotated = make_registry("chat", "team-a", spec(), secrets).client  # type: ignore[arg-type]
    elsewhere = make_registry("chat", "team-a", spec("http://s3.team-b:9000"), secrets).client  # type: ignore[arg-type]
    assert len({id(before), id(rotated), id(elsewhere)}) == 3
    assert rotated._request_signer._credentials.secret_key == "s3cr3t-two"


def test_the_cache_is_bounded_and_never_keyed_by_the_raw_secret() -> None:
    made: list[dict[str, Any]] = []
    cache = S3ClientCache(max_clients=3, factory=lambda service, **kw: made.append(kw) or object())
    clients = [cache.client(None, "us-east-1", {"AWS_ACCESS_KEY_ID": f"AKIA{i}", "AWS_SECRET_ACCESS_KEY": f"raw-{i}"})
               for i in range(5)]
    assert (len(made), len(cache)) == (5, 3)
    assert cache.client(None, "us-east-1", {"AWS_ACCESS_KEY_ID": "AKIA4", "AWS_SECRET_ACCESS_KEY": "raw-4"}) is (
        clients[4])  # the most recent are kept
    assert not any("raw-" in repr(slot) for slot in cache.slots())
    ambient = cache.client("http://s3:9000", "eu-west-1", {})  # no Secret: the operator's own identity
    assert cache.client("http://s3:9000", "eu-west-1", {}) is ambient
