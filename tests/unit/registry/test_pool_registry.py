"""pool.json in the registry, against a real S3 protocol server (moto's server mode, which answers
If-Match / If-None-Match on PutObject as S3 does: 412 on a stale or taken condition, 404 for If-Match
on a deleted object): created once, replaced only by compare-and-swap, so two writers never lose each
other's update; encrypted like every registry write; a new target starts a new pool."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tide_contracts.draft_pool import DomainSignature, DraftPool
from tide_contracts.registry import DraftRegistry, PoolConflict, RegistryError
from tide_contracts.registry_pool import PoolCache

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
CODE = DomainSignature(mean=(1.0, 0.0), std=(1.0, 0.5), tokens=400, projection="p1")
PROSE = DomainSignature(mean=(-1.0, 2.0), std=(1.5, 1.0), tokens=300, projection="p1")


def client_for(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test", config=Config(s3={"addressing_style": "path"}))


@pytest.fixture
def registry(s3_endpoint: str) -> DraftRegistry:
    client = client_for(s3_endpoint)
    bucket = f"tide-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return DraftRegistry(client, bucket, "team/llama", sse="AES256")


def record(reg: DraftRegistry, version: str, minutes: int, signature: DomainSignature | None = None,
           **kwargs: Any) -> list[str]:
    defaults: dict[str, Any] = {"target_revision": "rev-1", "tokenizer_hash": "tok-1"}
    return reg.record_served(version, now=NOW + timedelta(minutes=minutes), signature=signature,
                             **{**defaults, **kwargs})


def test_the_first_write_creates_an_encrypted_pool_under_the_prefix(registry: DraftRegistry) -> None:
    assert registry.pool() == (None, None)
    assert record(registry, "v1", 0, CODE) == []
    pool, etag = registry.pool()
    assert pool is not None
    assert etag
    assert (pool.target_revision, pool.tokenizer_hash) == ("rev-1", "tok-1")
    entry = pool.entry("v1")
    assert entry is not None
    assert (entry.signature, entry.last_served_at) == (CODE, NOW.timestamp())
    head = registry.client.head_object(Bucket=registry.bucket, Key="team/llama/pool.json")
    assert head["ServerSideEncryption"] == "AES256"


def test_a_stale_write_loses_and_the_winners_update_stays(registry: DraftRegistry) -> None:
    record(registry, "v1", 0, CODE)
    mine, stale_etag = registry.pool()
    assert mine is not None
    record(registry, "v2", 1, PROSE)  # another writer, between my read and my write
    winner = registry.pool()
    with pytest.raises(PoolConflict, match="read it again"):
        registry.replace_pool(mine.model_copy(update={"entries": ()}), stale_etag)
    assert registry.pool() == winner
    with pytest.raises(PoolConflict):  # "there is none yet" is no longer true: create-only
        registry.replace_pool(DraftPool(target_revision="rev-1"), None)
    registry.client.delete_object(Bucket=registry.bucket, Key=registry.key("pool.json"))
    with pytest.raises(PoolConflict, match="deleted"):  # If-Match on an object deleted since the read
        registry.replace_pool(DraftPool(target_revision="rev-1"), winner[1])


class RacingClient:
    """Another writer records a version just before each of our first ``races`` writes of pool.json."""

    def __init__(self, inner: Any, rival: DraftRegistry, races: int = 1) -> None:
        self.inner, self.rival, self.races, self.raced = inner, rival, races, 0

    def put_object(self, **kwargs: Any) -> Any:
        if kwargs["Key"].endswith("/pool.json") and self.raced < self.races:
            self.raced += 1  # a new time each race: the same body again would keep the same ETag
            record(self.rival, f"v{100 + self.raced}", 10 + self.raced, PROSE)
        return self.inner.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def racing(registry: DraftRegistry, races: int) -> tuple[DraftRegistry, RacingClient]:
    rival = DraftRegistry(client_for(registry.client.meta.endpoint_url), registry.bucket, registry.prefix,
                          sse="AES256")
    client = RacingClient(registry.client, rival, races)
    return DraftRegistry(client, registry.bucket, registry.prefix, sse="AES256"), client


def test_two_writers_never_lose_each_others_update(registry: DraftRegistry) -> None:
    record(registry, "v1", 0, CODE)
    mine, client = racing(registry, races=1)
    record(mine, "v2", 20, CODE)  # loses the first race, reads again, retries
    pool, _ = registry.pool()
    assert pool is not None
    assert client.raced == 1
    assert [e.version for e in pool.entries] == ["v1", "v101", "v2"]


def test_a_writer_that_keeps_losing_gives_up_with_a_conflict(registry: DraftRegistry) -> None:
    record(registry, "v1", 0)
    mine, client = racing(registry, races=99)
    with pytest.raises(PoolConflict, match="lost 3 races"):
        record(mine, "v2", 20, attempts=3)
    pool, _ = registry.pool()
    assert pool is not None
    assert client.raced == 3
    assert [e.version for e in pool.entries] == ["v1", "v101", "v102", "v103"]  # every rival's update kept


def test_the_pool_is_bounded_and_a_new_target_starts_a_new_one(registry: DraftRegistry) -> None:
    for minute, version in enumerate(("v1", "v2", "v3")):
        record(registry, version, minute, max_drafts=2, pinned={"v1"})
    pool, _ = registry.pool()
    assert pool is not None
    assert [e.version for e in pool.entries] == ["v1", "v3"]  # v2 left the index; v1 is pinned
    assert record(registry, "v4", 10, target_revision="rev-2") == []
    pool, _ = registry.pool()
    assert pool is not None
    assert (pool.target_revision, [e.version for e in pool.entries]) == ("rev-2", ["v4"])


def test_an_index_this_version_cannot_read_is_reported_and_left_alone(registry: DraftRegistry) -> None:
    key = registry.key("pool.json")
    registry.client.put_object(Bucket=registry.bucket, Key=key, Body=b'{"pool_version": 2, "shards": []}')
    with pytest.raises(RegistryError, match="not a draft pool index"):
        record(registry, "v1", 0)
    body = registry.client.get_object(Bucket=registry.bucket, Key=key)["Body"].read()
    assert body == b'{"pool_version": 2, "shards": []}'


class CountingClient:
    """The boto3 client, counting GetObject calls and the ones a 304 answered."""

    def __init__(self, client: Any) -> None:
        self.client, self.gets, self.not_modified = client, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def get_object(self, **kwargs: Any) -> Any:
        self.gets += 1
        try:
            return self.client.get_object(**kwargs)
        except self.client.exceptions.ClientError as e:
            if e.response["ResponseMetadata"]["HTTPStatusCode"] == 304:
                self.not_modified += 1
            raise


def test_a_cached_pool_is_read_again_only_when_it_changed(registry: DraftRegistry) -> None:
    counting, cache = CountingClient(registry.client), PoolCache()
    cached = DraftRegistry(counting, registry.bucket, "team/llama", sse="AES256", pool_cache=cache)
    record(registry, "v1", 0, CODE)
    first, etag = cached.pool()
    assert first is not None
    assert cached.pool() == (first, etag)
    assert cached.pool() == (first, etag)
    assert (counting.gets, counting.not_modified) == (3, 2)  # asked each time, sent whole once
    record(registry, "v2", 1, PROSE)  # another writer (a replaced leader, the CLI): a new ETag
    second, new_etag = cached.pool()
    assert second is not None
    assert new_etag != etag
    assert [e.version for e in second.entries] == [e.version for e in registry.pool()[0].entries]  # type: ignore[union-attr]
    assert counting.not_modified == 2
    # Compare-and-swap through the cached registry still loses to a write it has not seen.
    mine, seen = cached.pool()
    record(registry, "v3", 2, CODE)
    assert mine is not None
    with pytest.raises(PoolConflict):
        cached.replace_pool(mine, seen)
    assert {e.version for e in cached.pool()[0].entries} == {"v1", "v2", "v3"}  # type: ignore[union-attr]


def test_a_cache_of_another_key_is_not_asked_with_its_etag(registry: DraftRegistry) -> None:
    record(registry, "v1", 0, CODE)
    cache = PoolCache()
    other = DraftRegistry(registry.client, registry.bucket, "team/other", pool_cache=cache)
    DraftRegistry(registry.client, registry.bucket, "team/llama", pool_cache=cache).pool()
    assert other.pool() == (None, None)  # the other prefix has no pool: not llama's cached one
