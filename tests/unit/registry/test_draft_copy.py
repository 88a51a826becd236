"""Promotion in bounded memory: streaming verification and S3 server-side copies (moto's server mode).

Checks: the multipart ranges cover every byte within S3's part limits; above the threshold a
candidate file is copied with UploadPartCopy parts pinned to the ETag its verification read, and
every write (CopyObject, CreateMultipartUpload) carries the registry's SSE settings; a part that
fails aborts the upload, removes nothing promoted and leaves the pointer; the checksum is computed
from 1 MiB chunks of a stream, and a mismatch refuses before anything is written.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError

from tide_contracts.draft_copy import (
    HASH_CHUNK_BYTES,
    MAX_COPY_BYTES,
    MAX_PARTS,
    MIN_PART_BYTES,
    copy_ranges,
    uses_multipart,
)
from tide_contracts.registry import (
    ChecksumMismatch,
    DraftRegistry,
    FileEntry,
    Manifest,
    RegistryError,
    manifest_json,
)
from tide_operator.catalog import ConfigError
from tide_operator.config import load_operator_config

MiB = 2**20
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
REV = "rev-abc"
THRESHOLD = MIN_PART_BYTES  # the smallest S3 allows: a 12 MiB file copies in three parts
WEIGHTS = "model.safetensors"


@pytest.mark.parametrize(
    ("size", "part", "expected"),
    [
        (12 * MiB, 5 * MiB, [(0, 5 * MiB - 1), (5 * MiB, 10 * MiB - 1), (10 * MiB, 12 * MiB - 1)]),
        (5 * MiB, 5 * MiB, [(0, 5 * MiB - 1)]),
        (6 * MiB, 1 * MiB, [(0, 5 * MiB - 1), (5 * MiB, 6 * MiB - 1)]),  # below S3's minimum part: 5 MiB
        (12 * 1024**3, 8 * 1024**3, [(0, MAX_COPY_BYTES - 1), (MAX_COPY_BYTES, 2 * MAX_COPY_BYTES - 1),
                                     (2 * MAX_COPY_BYTES, 12 * 1024**3 - 1)]),  # above S3's largest part: 5 GiB
    ],
)
def test_copy_ranges_are_parts_within_s3_limits(size: int, part: int, expected: list[tuple[int, int]]) -> None:
    assert copy_ranges(size, part) == expected


@pytest.mark.parametrize("size", [1, MIN_PART_BYTES + 1, MAX_PARTS * MIN_PART_BYTES + 1, 3 * 1024**4 + 7])
def test_copy_ranges_cover_every_byte_once_in_at_most_10000_parts(size: int) -> None:
    ranges = copy_ranges(size, MIN_PART_BYTES)
    assert len(ranges) <= MAX_PARTS
    assert ranges[0][0] == 0
    assert ranges[-1][1] == size - 1
    assert all(nxt[0] == prev[1] + 1 for prev, nxt in itertools.pairwise(ranges))
    assert all(MIN_PART_BYTES <= last - first + 1 <= MAX_COPY_BYTES for first, last in ranges[:-1])


@pytest.mark.parametrize(
    ("size", "threshold", "multipart"),
    [(THRESHOLD, THRESHOLD, False), (THRESHOLD + 1, THRESHOLD, True), (0, THRESHOLD, False),
     (MAX_COPY_BYTES, 2 * MAX_COPY_BYTES, False), (MAX_COPY_BYTES + 1, 2 * MAX_COPY_BYTES, True)],
)
def test_multipart_above_the_threshold_and_above_s3s_copy_limit(size: int, threshold: int, multipart: bool) -> None:
    assert uses_multipart(size, threshold) is multipart


def test_operator_config_carries_the_threshold_within_s3s_part_limits() -> None:
    assert load_operator_config({}).promotion.multipart_copy_threshold_bytes == MAX_COPY_BYTES
    assert load_operator_config({"promotion": {"multipartCopyThresholdMib": 8}}).promotion \
        .multipart_copy_threshold_bytes == 8 * MiB
    with pytest.raises(ConfigError, match="multipartCopyThresholdMib"):
        load_operator_config({"promotion": {"multipartCopyThresholdMib": 4}})


class Recording:
    """The registry's S3 client, recording calls; ``fail`` maps a method to the call number that raises."""

    def __init__(self, client: Any, fail: dict[str, int] | None = None) -> None:
        self.client, self.calls, self.fail = client, [], dict(fail or {})
        self.chunks: dict[str, list[int]] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            if self.fail.get(name) == sum(1 for n, _ in self.calls if n == name):
                raise ClientError({"Error": {"Code": "PreconditionFailed", "Message": "source changed"}}, name)
            result = method(*args, **kwargs)
            if name == "get_object" and kwargs["Key"].endswith(WEIGHTS):
                result["Body"] = ChunkOnlyBody(result["Body"], self.chunks.setdefault(kwargs["Key"], []))
            return result
        return call

    def named(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, kwargs in self.calls if n == name]


class ChunkOnlyBody:
    """A streaming body that records chunk sizes and refuses to be read whole."""

    def __init__(self, body: Any, sizes: list[int]) -> None:
        self.body, self.sizes = body, sizes

    def iter_chunks(self, chunk_size: int) -> Iterator[bytes]:
        for chunk in self.body.iter_chunks(chunk_size):
            self.sizes.append(len(chunk))
            yield chunk

    def read(self, amt: int | None = None) -> bytes:
        raise AssertionError("a draft file was read whole")


@pytest.fixture
def s3(s3_endpoint: str) -> Any:  # the suite's loopback S3 server (tests/conftest.py)
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test", config=Config(s3={"addressing_style": "path"}))


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"tide-{uuid.uuid4().hex[:12]}"  # a fresh bucket per test
    s3.create_bucket(Bucket=name)
    return name


def registry_on(client: Any, bucket: str, **sse: str) -> DraftRegistry:
    return DraftRegistry(client, bucket, "team/llama", multipart_copy_threshold=THRESHOLD, **sse)


def put_candidate(reg: DraftRegistry, run_id: str, weights: bytes, *, stored: bytes | None = None) -> None:
    files = {"config.json": b'{"arch": "eagle3"}', WEIGHTS: weights}
    for name, body in files.items():
        kept = stored if stored is not None and name == WEIGHTS else body
        reg.client.put_object(Bucket=reg.bucket, Key=reg.key("candidates", run_id, name), Body=kept)
    manifest = Manifest(kind="candidate", run_id=run_id, created_at=NOW.isoformat(), target_revision=REV,
                        files={n: FileEntry(sha256=hashlib.sha256(b).hexdigest(), bytes=len(b))
                               for n, b in files.items()})
    reg.client.put_object(Bucket=reg.bucket, Key=reg.key("candidates", run_id, "manifest.json"),
                          Body=manifest_json(manifest).encode())


def drafts(reg: DraftRegistry) -> set[str]:
    return set(reg._list(reg.key("drafts") + "/"))


def open_uploads(reg: DraftRegistry) -> list[Any]:
    return list(reg.client.list_multipart_uploads(Bucket=reg.bucket).get("Uploads", []))


@pytest.mark.parametrize("sse", [{"sse": "AES256"}, {"sse": "aws:kms", "kms_key_id": "alias/tide-drafts"}])
def test_a_large_file_is_copied_in_parts_pinned_to_the_verified_etag_with_sse(s3: Any, bucket: str, sse: dict) -> None:
    weights = os.urandom(2 * THRESHOLD + MiB + 1)
    recorder = Recording(s3)
    reg = registry_on(recorder, bucket, **sse)
    put_candidate(reg, "r1", weights)
    etag = s3.head_object(Bucket=reg.bucket, Key=reg.key("candidates", "r1", WEIGHTS))["ETag"]
    assert reg.promote("r1", target_revision=REV, tokenizer_hash=None, now=NOW).version == "v1"

    parts = recorder.named("upload_part_copy")
    ranges = copy_ranges(len(weights), THRESHOLD)
    assert [p["CopySourceRange"] for p in parts] == [f"bytes={first}-{last}" for first, last in ranges]
    assert {p["CopySourceIfMatch"] for p in parts} == {etag}
    expected_sse = {"ServerSideEncryption": sse["sse"]}
    if "kms_key_id" in sse:
        expected_sse["SSEKMSKeyId"] = sse["kms_key_id"]
    writes = [*recorder.named("create_multipart_upload"), *recorder.named("copy_object")]
    assert [w["Key"].rsplit("/", 1)[-1] for w in writes] == [WEIGHTS, "config.json"]
    assert all(expected_sse.items() <= w.items() for w in writes)
    copied = s3.get_object(Bucket=reg.bucket, Key=reg.key("drafts", "v1", WEIGHTS))
    assert hashlib.sha256(copied["Body"].read()).hexdigest() == hashlib.sha256(weights).hexdigest()
    assert copied["ServerSideEncryption"] == sse["sse"]
    assert open_uploads(reg) == []


def test_the_checksum_is_computed_from_a_stream_of_bounded_chunks(s3: Any, bucket: str) -> None:
    weights = os.urandom(3 * HASH_CHUNK_BYTES + 17)
    recorder = Recording(s3)
    reg = registry_on(recorder, bucket)
    put_candidate(reg, "r1", weights)
    reg.promote("r1", target_revision=REV, tokenizer_hash=None, now=NOW)
    (sizes,) = recorder.chunks.values()
    assert sum(sizes) == len(weights)
    assert max(sizes) <= HASH_CHUNK_BYTES
    # Under drafts/ the operator writes only the claim and the manifest; the files are S3's copies.
    written = [w["Key"].rsplit("/", 1)[-1] for w in recorder.named("put_object") if "/drafts/" in w["Key"]]
    assert written == [".claim", "manifest.json"]
    assert [c["Key"].rsplit("/", 1)[-1] for c in recorder.named("copy_object")] == ["config.json", WEIGHTS]


def test_a_failed_part_aborts_the_upload_and_keeps_the_promoted_draft(s3: Any, bucket: str) -> None:
    reg = registry_on(s3, bucket, sse="AES256")
    put_candidate(reg, "r1", os.urandom(MiB))
    reg.promote("r1", target_revision=REV, tokenizer_hash=None, now=NOW)
    before, before_drafts = reg.promoted(), drafts(reg)
    put_candidate(reg, "r2", os.urandom(2 * THRESHOLD + 1))
    flaky = registry_on(Recording(s3, fail={"upload_part_copy": 2}), reg.bucket, sse="AES256")
    with pytest.raises(RegistryError, match=r"copying .*candidates/r2/model.safetensors to .*drafts/v2/"):
        flaky.promote("r2", target_revision=REV, tokenizer_hash=None, now=NOW)
    assert open_uploads(reg) == []  # aborted: no hidden parts left behind
    assert reg.promoted() == before
    assert drafts(reg) == before_drafts | {reg.key("drafts", "v2", ".claim")}
    assert reg.promote("r2", target_revision=REV, tokenizer_hash=None, now=NOW).version == "v3"


class LostAnswer(Recording):
    """CompleteMultipartUpload succeeds in S3 but its answer is lost (a read timeout)."""

    def complete_multipart_upload(self, **kwargs: Any) -> Any:
        self.client.complete_multipart_upload(**kwargs)
        raise ReadTimeoutError(endpoint_url="http://127.0.0.1:9")


def test_a_copy_finished_in_s3_whose_answer_was_lost_is_removed(s3: Any, bucket: str) -> None:
    reg = registry_on(s3, bucket)
    put_candidate(reg, "r1", os.urandom(2 * THRESHOLD + 1))
    with pytest.raises(ReadTimeoutError):
        registry_on(LostAnswer(s3), bucket).promote("r1", target_revision=REV, tokenizer_hash=None, now=NOW)
    assert drafts(reg) == {reg.key("drafts", "v1", ".claim")}
    assert reg.promoted() == (None, None)


def test_a_checksum_mismatch_refuses_before_anything_is_written(s3: Any, bucket: str) -> None:
    reg = registry_on(s3, bucket, sse="AES256")
    put_candidate(reg, "r1", os.urandom(MiB))
    reg.promote("r1", target_revision=REV, tokenizer_hash=None, now=NOW)
    before, before_drafts = reg.promoted(), drafts(reg)
    weights = os.urandom(2 * THRESHOLD + 1)
    put_candidate(reg, "r2", weights, stored=weights[:-1] + bytes([weights[-1] ^ 1]))
    recorder = Recording(s3)
    with pytest.raises(ChecksumMismatch) as refused:
        registry_on(recorder, reg.bucket, sse="AES256").promote("r2", target_revision=REV, tokenizer_hash=None,
                                                                 now=NOW)
    message = str(refused.value)
    assert reg.key("candidates", "r2", WEIGHTS) in message
    assert hashlib.sha256(weights).hexdigest() in message
    assert "not promoting" in message
    assert reg.promoted() == before
    assert drafts(reg) == before_drafts
    assert [n for n, _ in recorder.calls if n in ("put_object", "copy_object", "create_multipart_upload")] == []
