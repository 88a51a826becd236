"""Promotion's data path in bounded memory: verify a candidate file by streaming it, copy it in S3.

Nothing here holds a file: the checksum is a sha256 over 1 MiB chunks of one GET, and the copy to
drafts/vN/ is S3's own (CopyObject, or a multipart copy of byte ranges above a threshold), so the
operator's memory does not grow with the draft. The copy is pinned to the ETag the verifying read
saw (CopySourceIfMatch): a candidate replaced between the two fails the copy instead of promoting
bytes nobody checked. CopyObject does not inherit the source's encryption, so every copy carries
the registry's SSE settings itself.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

HASH_CHUNK_BYTES = 1 << 20  # per read of the verifying stream; the only buffer promotion holds
MIN_PART_BYTES = 5 * 1024**2  # S3: every part but the last is at least 5 MiB
MAX_COPY_BYTES = 5 * 1024**3  # S3: largest CopyObject and largest UploadPartCopy part
MAX_PARTS = 10_000  # S3: parts per multipart upload
DEFAULT_MULTIPART_COPY_THRESHOLD = MAX_COPY_BYTES


@dataclass(frozen=True)
class StreamedObject:
    sha256: str
    bytes: int
    etag: str  # of the bytes hashed: the copy is pinned to it


def copy_ranges(size: int, part_bytes: int) -> list[tuple[int, int]]:
    """Inclusive byte ranges of a multipart copy: ``part_bytes`` each (clamped to S3's part limits
    and grown so there are at most 10,000 parts), the last one shorter."""
    part = min(max(part_bytes, MIN_PART_BYTES, -(-size // MAX_PARTS)), MAX_COPY_BYTES)
    return [(start, min(start + part, size) - 1) for start in range(0, size, part)]


def uses_multipart(size: int, threshold: int) -> bool:
    """CopyObject up to the threshold (never above S3's 5 GiB CopyObject limit), multipart above it."""
    return size > min(threshold, MAX_COPY_BYTES)


def stream_sha256(client: Any, bucket: str, key: str) -> StreamedObject:
    """sha256 and length of one GET, read in 1 MiB chunks (never the whole object at once)."""
    obj = client.get_object(Bucket=bucket, Key=key)
    digest, seen = hashlib.sha256(), 0
    for chunk in obj["Body"].iter_chunks(HASH_CHUNK_BYTES):
        digest.update(chunk)
        seen += len(chunk)
    return StreamedObject(digest.hexdigest(), seen, str(obj["ETag"]))


def server_side_copy(client: Any, bucket: str, source: str, destination: str, *, size: int, etag: str,
                     sse: dict[str, str], threshold: int) -> int:
    """Copy source to destination inside S3; returns the number of parts (1 for CopyObject).

    S3's errors pass through (a 412 means the source changed since ``etag`` was read).
    """
    pinned = {"CopySource": {"Bucket": bucket, "Key": source}, "CopySourceIfMatch": etag}
    if not uses_multipart(size, threshold):
        client.copy_object(Bucket=bucket, Key=destination, **pinned, **sse)
        return 1
    return _multipart_copy(client, bucket, destination, copy_ranges(size, threshold), pinned, sse)


def _multipart_copy(client: Any, bucket: str, destination: str, ranges: list[tuple[int, int]],
                    pinned: dict[str, Any], sse: dict[str, str]) -> int:
    """UploadPartCopy per range; any failure aborts the upload so no hidden parts stay billed."""
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=destination, **sse)["UploadId"]
    target = {"Bucket": bucket, "Key": destination, "UploadId": upload_id}
    try:
        parts = []
        for number, (first, last) in enumerate(ranges, start=1):
            result = client.upload_part_copy(**target, PartNumber=number, CopySourceRange=f"bytes={first}-{last}",
                                             **pinned)
            parts.append({"PartNumber": number, "ETag": result["CopyPartResult"]["ETag"]})
        client.complete_multipart_upload(**target, MultipartUpload={"Parts": parts})
    except (ClientError, BotoCoreError, OSError, KeyError):
        with contextlib.suppress(ClientError, BotoCoreError):  # best effort: S3 may be what failed
            client.abort_multipart_upload(**target)
        raise
    return len(ranges)
