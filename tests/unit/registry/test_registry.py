"""The S3 draft registry against a real S3 protocol server (moto's server mode on 127.0.0.1).

Checks: promotion assigns v1, v2, ...; a checksum or target-revision mismatch refuses and leaves
the pointer alone; a retried promotion of the promoted run makes no second version; a copy that
fails midway removes its partial files; a lost pointer race raises PointerConflict; the capture
buffer is pruned oldest first; no complete draft under drafts/ is ever deleted.
"""

from __future__ import annotations

import hashlib
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import numpy as np
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError
from moto.server import ThreadedMotoServer

from tide_contracts.registry import (
    CAPTURE_SAMPLES_METADATA,
    CAPTURE_SIGNATURE_METADATA,
    LAUNCH_DRAFT,
    CaptureLimits,
    CaptureObject,
    ChecksumMismatch,
    DraftRegistry,
    FileEntry,
    IncompatibleDraft,
    Manifest,
    PointerConflict,
    RegistryError,
    UnknownVersion,
    captures_to_prune,
    manifest_json,
)
from tide_contracts.signature import domain_signature

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
REV = "rev-abc"
TOK = "tok-123"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def registry(endpoint: str) -> DraftRegistry:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(s3={"addressing_style": "path"}),
    )
    bucket = f"tide-{uuid.uuid4().hex[:12]}"  # a fresh bucket per test (parametrized ones too)
    client.create_bucket(Bucket=bucket)
    return DraftRegistry(client, bucket, "team/llama", sse="AES256")


def put_candidate(reg: DraftRegistry, run_id: str, *, revision: str = REV, corrupt: bool = False) -> None:
    files = {"config.json": b'{"arch": "eagle3"}', "model.safetensors": run_id.encode() * 1000}
    entries = {n: FileEntry(sha256=hashlib.sha256(b).hexdigest(), bytes=len(b)) for n, b in files.items()}
    for name, body in files.items():
        stored = body[:-1] + b"X" if corrupt and name == "model.safetensors" else body
        reg.client.put_object(Bucket=reg.bucket, Key=reg.key("candidates", run_id, name), Body=stored)
    manifest = Manifest(
        kind="candidate",
        run_id=run_id,
        created_at=NOW.isoformat(),
        target_revision=revision,
        tokenizer_hash=TOK,
        eval={"candidate_acceptance_length": 2.5},
        files=entries,
    )
    reg.client.put_object(
        Bucket=reg.bucket,
        Key=reg.key("candidates", run_id, "manifest.json"),
        Body=manifest_json(manifest).encode(),
    )


def all_keys(reg: DraftRegistry, under: str) -> set[str]:
    return set(reg._list(reg.key(under) + "/"))


def test_promotions_assign_increasing_versions_and_record_history(registry: DraftRegistry) -> None:
    for run_id in ("r1", "r2"):
        put_candidate(registry, run_id)
    first = registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    second = registry.promote("r2", target_revision=REV, tokenizer_hash=TOK, now=NOW + timedelta(minutes=1))
    assert (first.version, second.version) == ("v1", "v2")
    pointer, _ = registry.promoted()
    assert pointer is not None
    assert (pointer.version, pointer.run_id) == ("v2", "r2")
    draft = registry.draft_manifest("v2")
    assert (draft.kind, draft.version, draft.target_revision) == ("draft", "v2", REV)
    body = registry._get(registry.key("drafts", "v2", "model.safetensors"))
    assert hashlib.sha256(body).hexdigest() == draft.files["model.safetensors"].sha256
    assert [(h.action, h.version, h.previous) for h in registry.history()] == [
        ("promote", "v1", None),
        ("promote", "v2", "v1"),
    ]
    head = registry.client.head_object(Bucket=registry.bucket, Key=registry.key("promoted.json"))
    assert head.get("ServerSideEncryption") == "AES256"


@pytest.mark.parametrize(
    ("candidate_kwargs", "promote_kwargs", "error"),
    [
        ({"corrupt": True}, {"target_revision": REV, "tokenizer_hash": TOK}, ChecksumMismatch),
        ({"revision": "rev-old"}, {"target_revision": REV, "tokenizer_hash": TOK}, IncompatibleDraft),
        ({}, {"target_revision": REV, "tokenizer_hash": "other-tokenizer"}, IncompatibleDraft),
    ],
)
def test_refused_promotion_leaves_pointer_and_drafts_unchanged(
    registry: DraftRegistry, candidate_kwargs: dict, promote_kwargs: dict, error: type[Exception]
) -> None:
    put_candidate(registry, "r1")
    registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    before_pointer, before_etag = registry.promoted()
    before_drafts = all_keys(registry, "drafts")
    put_candidate(registry, "r2", **candidate_kwargs)
    with pytest.raises(error):
        registry.promote("r2", now=NOW, **promote_kwargs)
    assert registry.promoted() == (before_pointer, before_etag)
    assert all_keys(registry, "drafts") == before_drafts
    assert [h.action for h in registry.history()] == ["promote"]


def test_concurrent_pointer_update_one_wins_the_other_errors(registry: DraftRegistry) -> None:
    put_candidate(registry, "r1")
    registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    _, stale_etag = registry.promoted()
    put_candidate(registry, "r2")
    registry.promote("r2", target_revision=REV, tokenizer_hash=TOK, now=NOW + timedelta(seconds=1))
    winner = registry.promoted()
    loser = winner[0].model_copy(update={"version": "v1", "run_id": "r1"})  # type: ignore[union-attr]
    with pytest.raises(PointerConflict):
        registry._replace_pointer(loser, stale_etag)
    assert registry.promoted() == winner


def test_first_pointer_write_is_create_only(registry: DraftRegistry) -> None:
    put_candidate(registry, "r1")
    pointer = registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    with pytest.raises(PointerConflict):
        registry._replace_pointer(pointer, None)  # "nothing promoted yet" is no longer true


def test_claimed_version_is_never_reused(registry: DraftRegistry) -> None:
    registry._put(registry.key("drafts", "v1", ".claim"), b"", IfNoneMatch="*")  # a crashed promotion
    put_candidate(registry, "r1")
    assert registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW).version == "v2"


def test_a_retried_promotion_of_the_promoted_run_makes_no_second_version(registry: DraftRegistry) -> None:
    put_candidate(registry, "r1")
    first = registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    _, etag = registry.promoted()
    again = registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW + timedelta(minutes=1))
    assert again == first
    assert registry.promoted() == (first, etag)  # the pointer was not rewritten
    assert registry.list_versions() == ["v1"]
    assert [(h.action, h.version) for h in registry.history()] == [("promote", "v1")]


class FailingCopies:
    """The registry's S3 client, except that copies after the first `ok` fail as if S3 went away."""

    def __init__(self, client: object, ok: int) -> None:
        self._client, self._left = client, ok

    def copy_object(self, *args: object, **kwargs: object) -> object:
        if self._left == 0:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
        self._left -= 1
        return self._client.copy_object(*args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)


def test_a_copy_that_fails_midway_removes_what_it_wrote_and_leaves_the_pointer(registry: DraftRegistry) -> None:
    put_candidate(registry, "r1")
    flaky = DraftRegistry(FailingCopies(registry.client, ok=1), registry.bucket, registry.prefix)
    with pytest.raises(EndpointConnectionError):
        flaky.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    assert registry.promoted() == (None, None)
    assert all_keys(registry, "drafts") == {registry.key("drafts", "v1", ".claim")}  # the claim keeps v1 taken
    assert registry.history() == []
    retried = registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    assert retried.version == "v2"
    assert registry.draft_manifest("v2").files == registry.candidate_manifest("r1").files


def test_rollback_flips_the_pointer_back_and_keeps_every_draft(registry: DraftRegistry) -> None:
    for run_id in ("r1", "r2"):
        put_candidate(registry, run_id)
        registry.promote(run_id, target_revision=REV, tokenizer_hash=TOK, now=NOW)
    drafts = all_keys(registry, "drafts")
    registry.roll_back("v1", target_revision=REV, now=NOW, reason="CanaryFailed")
    registry.record_rejection("r3", now=NOW, reason="CanaryInconclusive")
    pointer, _ = registry.promoted()
    assert pointer is not None
    assert pointer.version == "v1"
    assert all_keys(registry, "drafts") == drafts
    assert [h.action for h in registry.history()][-2:] == ["rollback", "reject"]
    assert registry.history()[-1].run_id == "r3"
    registry.record_rejection("v2", now=NOW, reason="CanaryFailed")  # a recalled v2 lost its canary
    registry.record_rejection(LAUNCH_DRAFT, now=NOW, reason="CanaryFailed")
    recalled = registry.history()[-2:]
    assert [(h.run_id, h.reason, h.version) for h in recalled] == [
        (None, "recalled v2: CanaryFailed", "v1"), (None, "recalled initial: CanaryFailed", "v1")]


def test_a_flip_by_hand_checks_the_draft_pins_its_manifest_and_is_recorded_as_manual(
        registry: DraftRegistry) -> None:
    for run_id in ("r1", "r2", "r3"):
        put_candidate(registry, run_id)
        registry.promote(run_id, target_revision=REV, tokenizer_hash=TOK, now=NOW)
    assert registry.previous_version() == "v2"  # what a rollback goes back to

    pointer = registry.point_to("v1", target_revision=REV, now=NOW, reason="tide promote", action="promote",
                                manual=True)
    written = registry.client.get_object(Bucket=registry.bucket, Key=registry.key("drafts", "v1", "manifest.json"))
    assert pointer.manifest_sha256 == hashlib.sha256(written["Body"].read()).hexdigest()  # pods verify it
    assert (pointer.version, pointer.run_id) == ("v1", "r1")
    last = registry.history()[-1]
    assert (last.action, last.version, last.previous, last.run_id, last.manual) == ("promote", "v1", "v3", "r1", True)
    assert registry.previous_version() == "v3"  # two rollbacks in a row return, like `kubectl rollout undo`

    drafts = all_keys(registry, "drafts")
    with pytest.raises(UnknownVersion, match="v9 was never promoted"):
        registry.point_to("v9", target_revision=REV, now=NOW, reason="", action="promote", manual=True)
    with pytest.raises(UnknownVersion, match="not a draft version"):
        registry.point_to("../v1", target_revision=REV, now=NOW, reason="", action="promote", manual=True)
    with pytest.raises(IncompatibleDraft, match="target_revision"):
        registry.point_to("v2", target_revision="other-revision", now=NOW, reason="", action="rollback")
    assert registry.promoted()[0] == pointer  # refusals leave the pointer, the drafts and the history alone
    assert all_keys(registry, "drafts") == drafts
    assert len(registry.history()) == 4
    assert not registry.history()[0].manual  # the loop's own promotions


def test_the_first_promotion_rolls_back_to_the_launch_draft(registry: DraftRegistry) -> None:
    assert registry.previous_version() is None  # nothing promoted: nothing to go back from
    put_candidate(registry, "r1")
    registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    assert registry.previous_version() == LAUNCH_DRAFT  # v1 replaced the launch draft
    registry.roll_back(LAUNCH_DRAFT, target_revision=REV, now=NOW, reason="by hand", manual=True)
    assert registry.promoted()[0].version == LAUNCH_DRAFT
    assert registry.previous_version() == "v1"  # and a second rollback returns, like `kubectl rollout undo`


def capture(name: str, age_min: float, size: int = 1000, samples: int = 100) -> CaptureObject:
    return CaptureObject(name, size, NOW.timestamp() - 60 * age_min, samples)


@pytest.mark.parametrize(
    ("limits", "expected_pruned"),
    [
        (CaptureLimits(max_samples=250), ["c0", "c1"]),  # 400 samples -> keep the newest 200
        (CaptureLimits(max_bytes=2500), ["c0", "c1"]),  # 4000 bytes -> keep the newest 2000
        (CaptureLimits(retention_s=35 * 60), ["c0", "c1"]),  # 50 and 40 minutes old
        (CaptureLimits(max_samples=400, max_bytes=4000), []),  # exactly at the caps
        (CaptureLimits(max_samples=0), ["c0", "c1", "c2", "c3"]),
    ],
)
def test_capture_pruning_drops_oldest_first(limits: CaptureLimits, expected_pruned: list[str]) -> None:
    captures = [capture("c2", 30), capture("c0", 50), capture("c3", 20), capture("c1", 40)]
    assert captures_to_prune(captures, limits, NOW.timestamp()) == expected_pruned


def test_prune_deletes_captures_in_s3_and_never_drafts(registry: DraftRegistry) -> None:
    put_candidate(registry, "r1")
    registry.promote("r1", target_revision=REV, tokenizer_hash=TOK, now=NOW)
    drafts = all_keys(registry, "drafts")
    for i in range(4):
        registry.put_capture(f"c{i}.safetensors", b"x" * 1000, samples=100)
    assert sum(c.samples for c in registry.list_captures()) == 400
    deleted = registry.prune_captures(CaptureLimits(max_samples=250), datetime.now(UTC))
    assert len(deleted) == 2
    assert len(all_keys(registry, "captures")) == 2
    assert all_keys(registry, "drafts") == drafts
    expired = registry.prune_captures(CaptureLimits(retention_s=60), datetime.now(UTC) + timedelta(hours=1))
    assert len(expired) == 2
    assert not all_keys(registry, "captures")
    assert all_keys(registry, "drafts") == drafts


def test_prune_uses_a_given_listing_and_refuses_keys_outside_captures(registry: DraftRegistry) -> None:
    for i in range(3):
        registry.put_capture(f"c{i}.safetensors", b"x" * 1000, samples=100)
    listing = registry.list_captures()
    registry.put_capture("newer.safetensors", b"x" * 1000, samples=100)  # not in the listing: not counted
    deleted = registry.prune_captures(CaptureLimits(max_samples=200), datetime.now(UTC), captures=listing)
    assert deleted == [listing[0].key]
    assert len(all_keys(registry, "captures")) == 3

    put_candidate(registry, "r1")
    foreign = [CaptureObject(registry.key("candidates", "r1", "model.safetensors"), 1, 0.0, 1), *listing[1:]]
    with pytest.raises(RegistryError, match="refusing to prune outside"):
        registry.prune_captures(CaptureLimits(max_samples=0), datetime.now(UTC), captures=foreign)
    assert registry.key("candidates", "r1", "model.safetensors") in all_keys(registry, "candidates")
    assert len(all_keys(registry, "captures")) == 3  # nothing deleted at all


def test_listing_captures_heads_only_objects_it_has_not_counted(registry: DraftRegistry) -> None:
    """A pass lists the buffer every interval: a HEAD per object per pass would grow with the buffer."""
    heads: list[str] = []
    registry.client.meta.events.register("provide-client-params.s3.HeadObject",
                                         lambda params, **_: heads.append(params["Key"]))
    for i in range(3):
        registry.put_capture(f"c{i}.safetensors", b"x" * 1000, samples=10 + i)
    first = registry.list_captures()
    registry.put_capture("c3.safetensors", b"x" * 1000, samples=40)
    second = DraftRegistry(registry.client, registry.bucket, "team/llama", sample_cache=registry.sample_cache)
    listed = second.list_captures()
    assert [c.samples for c in first] == [10, 11, 12]
    assert [c.samples for c in listed] == [10, 11, 12, 40]
    assert sorted(heads) == sorted(c.key for c in listed)  # each object HEADed exactly once

    registry.put_capture("c0.safetensors", b"y" * 500, samples=7)  # rewritten under the same name: new ETag
    assert {c.key: c.samples for c in second.list_captures()}[registry.key("captures", "c0.safetensors")] == 7


def test_listing_captures_reads_each_objects_signature(registry: DraftRegistry) -> None:
    """The operator sees the newest traffic's domain from the metadata alone (control/draft_return.py); a
    pod's malformed metadata is no signature, never an error."""
    signature = domain_signature([np.random.default_rng(2).standard_normal((30, 3 * 8))], 8)
    registry.put_capture("signed.safetensors", b"x" * 100, samples=3, signature=signature)
    registry.put_capture("plain.safetensors", b"x" * 100, samples=2)
    registry.client.put_object(Bucket=registry.bucket, Key=registry.key("captures", "bad.safetensors"), Body=b"x",
                               Metadata={CAPTURE_SAMPLES_METADATA: "4", CAPTURE_SIGNATURE_METADATA: "1;x;y"})
    listed = {c.key.rsplit("/", 1)[-1]: c for c in registry.list_captures()}
    assert listed["signed.safetensors"].signature is not None
    assert listed["signed.safetensors"].signature.tokens == 30
    assert listed["signed.safetensors"].signature.mean == pytest.approx(signature.mean, rel=1e-5)
    assert (listed["plain.safetensors"].signature, listed["bad.safetensors"].signature) == (None, None)
    assert listed["bad.safetensors"].samples == 4
