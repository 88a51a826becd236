"""Every way a draft comes to serve touches the draft pool's index (issue 16), not only a promotion: the
launch draft as ``initial`` before anything is promoted, a user's rollback or promote (a pointer flip), the
spec's draftPin; so least-recently-served trimming is right, the serving and the pinned draft never leave,
and leaving the index deletes no drafts/vN. pool.json is read only when what serves changes; a failure is
one Warning Event, never raised. Against a real S3 protocol server (moto's server mode)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from test_promotion_records_pool import CODE, put_candidate

from tide_contracts.draft_pool import DomainSignature
from tide_contracts.registry import DraftRegistry
from tide_operator.api import parse_spec
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.passes import draft_pool_index
from tide_operator.passes.draft_pool_index import (
    DRAFT_POOL_NOT_UPDATED,
    DRAFT_POOL_TRIMMED,
    note_served,
    record_promotion,
)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
PROSE = DomainSignature(mean=(-1.0, 2.0), std=(1.5, 1.0), tokens=300, projection="p1")
CHAT = ("team", "chat")


class CountingClient:
    """The S3 client, counting the calls on pool.json by operation."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.pool_calls = inner, []

    def get_object(self, **kwargs: Any) -> Any:
        if kwargs["Key"].endswith("/pool.json"):
            self.pool_calls.append("get")
        return self.inner.get_object(**kwargs)

    def put_object(self, **kwargs: Any) -> Any:
        if kwargs["Key"].endswith("/pool.json"):
            self.pool_calls.append("put")
        return self.inner.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def registry(s3_endpoint: str) -> DraftRegistry:
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test", config=Config(s3={"addressing_style": "path"}))
    bucket = f"tide-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return DraftRegistry(CountingClient(client), bucket, "team/chat", sse="AES256")


@pytest.fixture(autouse=True)
def fresh_memory() -> Iterator[None]:
    draft_pool_index.forget(*CHAT)
    yield
    draft_pool_index.forget(*CHAT)


def spec_of(revision: str = "r1", *, initial: bool = True, max_drafts: int = 4,
            pin: str | None = None) -> TideDeploymentSpec:
    control: dict[str, Any] = {"draftPool": {"maxDrafts": max_drafts}}
    if pin:
        control["draftPin"] = pin
    body: dict[str, Any] = {"target": {"model": "m", "revision": revision}, "storage": {"s3": {"bucket": "tide"}},
                            "control": control}
    if initial:
        body["draft"] = {"initial": "/drafts/launch"}
    return parse_spec(body)


def at(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


def promote(registry: DraftRegistry, spec: TideDeploymentSpec, run: str, minutes: int,
            signature: DomainSignature | None = CODE) -> list[str]:
    """Promote ``run`` as effects.promote does; the versions that left the index (from its Event)."""
    put_candidate(registry, run, signature)
    pointer = registry.promote(run, target_revision="r1", tokenizer_hash=None, now=at(minutes))
    note = record_promotion(registry, spec, pointer, at(minutes), CHAT)
    return note.message.split(" left")[0].split(", ") if note else []


def listed(registry: DraftRegistry) -> dict[str, float]:
    pool, _ = registry.pool()
    assert pool is not None
    return {e.version: e.last_served_at for e in pool.entries}


def test_the_launch_draft_is_recorded_once_as_initial_and_kept_when_a_promotion_names_the_tokenizer(
        registry: DraftRegistry) -> None:
    spec = spec_of()
    calls = registry.client.pool_calls
    assert note_served(registry, spec, CHAT, "initial", at(0)) == []
    pool, _ = registry.pool()
    assert pool is not None
    assert (pool.tokenizer_hash, pool.entry("initial").signature) == (None, None)  # type: ignore[union-attr]
    calls.clear()
    for minute in (1, 2, 3):  # every later pass on the launch draft: pool.json is not read again
        assert note_served(registry, spec, CHAT, "initial", at(minute)) == []
    assert calls == []
    promote(registry, spec, "run-1", 5)  # the manifest names tok-1: not another tokenizer than "unknown"
    pool, _ = registry.pool()
    assert pool is not None
    assert (pool.tokenizer_hash, [e.version for e in pool.entries]) == ("tok-1", ["initial", "v1"])
    calls.clear()
    assert note_served(registry, spec, CHAT, "v1", at(6)) == []  # the pass after the promotion: remembered
    assert calls == []


def test_after_a_restart_the_index_is_read_once_and_written_only_if_it_lacks_what_serves(
        registry: DraftRegistry) -> None:
    spec = spec_of()
    note_served(registry, spec, CHAT, "initial", at(0))
    draft_pool_index.forget(*CHAT)  # a new operator process
    calls = registry.client.pool_calls
    calls.clear()
    assert note_served(registry, spec, CHAT, "initial", at(9)) == []
    assert note_served(registry, spec, CHAT, "initial", at(10)) == []
    assert calls == ["get"]
    assert listed(registry) == {"initial": at(0).timestamp()}
    no_launch_draft = spec_of(initial=False)  # the bootstrap head at K=0 is no draft of the pool
    draft_pool_index.forget(*CHAT)
    calls.clear()
    assert note_served(registry, no_launch_draft, CHAT, None, at(11)) == []
    assert calls == []


def test_a_rollback_touches_the_version_so_the_one_it_replaced_leaves_first(registry: DraftRegistry) -> None:
    spec = spec_of(initial=False, max_drafts=2)
    promote(registry, spec, "run-1", 1)
    promote(registry, spec, "run-2", 2, PROSE)
    registry.roll_back("v1", target_revision="r1", now=at(3), reason="tide rollback", manual=True)
    assert note_served(registry, spec, CHAT, "v1", at(3)) == []  # the pass after the flip
    assert listed(registry) == {"v1": at(3).timestamp(), "v2": at(2).timestamp()}
    assert registry.pool()[0].entry("v1").signature == CODE  # type: ignore[union-attr]
    assert promote(registry, spec, "run-3", 4) == ["v2"]  # v2 served less recently than v1 (rolled back to)
    assert sorted(listed(registry)) == ["v1", "v3"]
    assert registry.list_versions() == ["v1", "v2", "v3"]  # leaving the index deletes no draft


def test_a_pinned_draft_is_recorded_as_serving_and_never_leaves(registry: DraftRegistry) -> None:
    for n in (1, 2, 3):
        promote(registry, spec_of(initial=False), f"run-{n}", n)
    pinned = spec_of(initial=False, max_drafts=2, pin="v1")
    notes = note_served(registry, pinned, CHAT, "v3", at(10))  # the pointer says v3; the pin serves v1
    assert [(n.type, n.reason) for n in notes] == [("Normal", DRAFT_POOL_TRIMMED)]
    assert notes[0].message.startswith("v2 left the draft pool's index for v1 (maxDrafts 2)")
    assert listed(registry) == {"v1": at(10).timestamp(), "v3": at(3).timestamp()}
    calls = registry.client.pool_calls
    calls.clear()
    assert note_served(registry, pinned, CHAT, "v3", at(11)) == []  # ServeDraft every pass: not recorded again
    assert calls == []
    unpinned = spec_of(initial=False, max_drafts=1)
    notes = note_served(registry, unpinned, CHAT, "v3", at(12))  # the pointer serves again once unpinned
    assert listed(registry) == {"v3": at(12).timestamp()}  # v1, no longer pinned, served less recently
    assert [n.message.split(" left")[0] for n in notes] == ["v1"]
    assert registry.list_versions() == ["v1", "v2", "v3"]


def test_a_new_target_revision_starts_an_empty_pool_with_its_launch_draft(registry: DraftRegistry) -> None:
    spec = spec_of()
    note_served(registry, spec, CHAT, "initial", at(0))
    promote(registry, spec, "run-1", 1)
    assert note_served(registry, spec_of("r2"), CHAT, "initial", at(5)) == []  # sensors: no pointer for r2
    pool, _ = registry.pool()
    assert pool is not None
    assert (pool.target_revision, pool.tokenizer_hash, listed(registry)) == ("r2", None, {"initial": at(5).timestamp()})
    assert registry.list_versions() == ["v1"]


class UnreachablePool(DraftRegistry):
    def pool(self) -> Any:
        raise OSError("connection reset by peer")


def test_an_unreachable_pool_is_one_warning_not_an_error_every_pass(registry: DraftRegistry) -> None:
    unreachable = UnreachablePool(registry.client, registry.bucket, registry.prefix)
    notes = note_served(unreachable, spec_of(), CHAT, "initial", at(0))
    assert [(n.type, n.reason) for n in notes] == [("Warning", DRAFT_POOL_NOT_UPDATED)]
    assert "initial serves, but pool.json does not list it" in notes[0].message
    assert "connection reset" in notes[0].message
    assert note_served(unreachable, spec_of(), CHAT, "initial", at(1)) == []  # reported once per change


def test_a_pin_to_a_draft_of_another_target_or_to_none_is_not_listed(registry: DraftRegistry) -> None:
    promote(registry, spec_of(initial=False), "run-1", 1)
    notes = note_served(registry, spec_of("r2", pin="v1"), CHAT, None, at(2))
    assert [(n.type, n.reason) for n in notes] == [("Warning", DRAFT_POOL_NOT_UPDATED)]
    assert "trained for target revision r1, not r2" in notes[0].message
    notes = note_served(registry, spec_of(pin="v7"), CHAT, "v1", at(3))  # never promoted
    assert [(n.type, n.reason) for n in notes] == [("Warning", DRAFT_POOL_NOT_UPDATED)]
    assert listed(registry) == {"v1": at(1).timestamp()}
