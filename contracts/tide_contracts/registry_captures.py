"""The capture buffer in the registry: captures/ (hidden-state shards) and claims/ (a trainer's hold on them).

Mixed into DraftRegistry. Every delete stays under the buffer's own prefix (tide_contracts.prefix_delete).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from tide_contracts.draft_pool import DomainSignature
from tide_contracts.prefix_delete import DeletionRefused, delete_under_prefix
from tide_contracts.registry_store import PruneIncomplete, RegistryError, RegistryStore
from tide_contracts.signature import signature_from_metadata, signature_to_metadata

CAPTURE_SAMPLES_METADATA = "samples"  # S3 user metadata on a capture object: requests it holds
# S3 user metadata on a capture object: its rows' domain signature (tide_contracts.signature); absent
# from objects written before it, or by a writer that does not compute one.
CAPTURE_SIGNATURE_METADATA = "signature"
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # the trainer's run id
CLAIM_VERSION = 1  # claims/<run id>.json: docs/contracts/draft-registry.md


def capture_metadata(samples: int, signature: DomainSignature | None = None) -> dict[str, str]:
    """A capture object's S3 user metadata: how many requests it holds and, when known, its signature."""
    metadata = {CAPTURE_SAMPLES_METADATA: str(samples)}
    if signature is not None:
        metadata[CAPTURE_SIGNATURE_METADATA] = signature_to_metadata(signature)
    return metadata


@dataclass(frozen=True)
class CaptureObject:
    key: str
    size: int
    last_modified: float  # epoch seconds
    samples: int
    signature: DomainSignature | None = None  # of the object's rows, from its metadata (None: not given)


class CaptureSampleCache:
    """What each capture object's metadata says (samples, signature), keyed by (key, ETag), so a
    listing HEADs only new objects.

    Capture objects are written once and never changed, so metadata read once stays true; the ETag
    in the key covers an object overwritten under the same name anyway. Bounded: the oldest
    entries go first (the buffer itself is capped, so a live deployment stays well under it).
    """

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = max_entries
        self._samples: dict[tuple[str, str], tuple[int, DomainSignature | None]] = {}

    def get(self, key: str, etag: str) -> tuple[int, DomainSignature | None] | None:
        return self._samples.get((key, etag))

    def put(self, key: str, etag: str, samples: int, signature: DomainSignature | None = None) -> None:
        self._samples[(key, etag)] = (samples, signature)
        while len(self._samples) > self.max_entries:
            del self._samples[next(iter(self._samples))]

    def __len__(self) -> int:
        return len(self._samples)


@dataclass(frozen=True)
class CaptureLimits:
    """spec.control.capture: caps of the rolling buffer (seconds for retention)."""

    max_samples: int = 4096
    max_bytes: int = 2 * 1024**3
    retention_s: float = 86400.0


class CaptureBuffer(RegistryStore):
    """captures/ and claims/ under the registry prefix."""

    sample_cache: CaptureSampleCache  # HEADs only objects it has not seen (set by DraftRegistry)

    # -- captures -------------------------------------------------------------------------------
    def put_capture(self, name: str, data: bytes, samples: int, signature: DomainSignature | None = None) -> str:
        key = self.key("captures", name)
        self._put(key, data, Metadata=capture_metadata(samples, signature))
        return key

    def list_captures(self) -> list[CaptureObject]:
        """Oldest first. Objects without the samples metadata count as one sample; a missing or
        malformed signature is None.

        Both live in each object's metadata, which a listing does not return: one HEAD per object
        not yet in ``sample_cache``.
        """
        out = []
        for obj in self._list_objects(self.key("captures") + "/"):
            etag = str(obj.get("ETag", ""))
            known = self.sample_cache.get(obj["Key"], etag)
            if known is None:
                metadata = self.client.head_object(Bucket=self.bucket, Key=obj["Key"]).get("Metadata", {})
                known = (int(metadata.get(CAPTURE_SAMPLES_METADATA, "1")),
                         signature_from_metadata(metadata.get(CAPTURE_SIGNATURE_METADATA)))
                self.sample_cache.put(obj["Key"], etag, *known)
            samples, signature = known
            out.append(CaptureObject(obj["Key"], obj["Size"], obj["LastModified"].timestamp(), samples, signature))
        return sorted(out, key=lambda c: (c.last_modified, c.key))

    def prune_captures(
        self, limits: CaptureLimits, now: datetime, captures: list[CaptureObject] | None = None
    ) -> list[str]:
        """Delete the oldest captures beyond retention or the caps; returns the deleted keys.

        ``captures``: a listing the caller already made this pass (list_captures costs a HEAD per
        object); every key must lie under this registry's captures/ or nothing is deleted.
        """
        listed = self.list_captures() if captures is None else captures
        doomed = captures_to_prune(listed, limits, now.timestamp())
        if not doomed:
            return []
        try:
            outcome = delete_under_prefix(self.client, self.bucket, self.key("captures") + "/", doomed)
        except DeletionRefused as e:
            raise RegistryError(f"refusing to prune outside {self.key('captures')}/: {e}") from e
        except ClientError as e:
            raise RegistryError(f"pruning {self.key('captures')}/: {e}") from e
        if outcome.failed:  # never counted as deleted: the caller retries on a later pass
            raise PruneIncomplete(outcome.deleted, f"{len(outcome.deleted)} captures deleted, "
                                  f"{len(outcome.failed)} not: {outcome.describe_failures()}")
        return list(outcome.deleted)

    # -- capture claims (a running trainer's hold on the shards it reads) ------------------------
    def claim_key(self, run_id: str) -> str:
        if not _RUN_ID_RE.match(run_id):
            raise RegistryError(f"claim: run id {run_id!r} does not match {_RUN_ID_RE.pattern}")
        return self.key("claims", f"{run_id}.json")

    def put_claim(self, run_id: str, shards: list[CaptureObject], *, created_at: float, expires_at: float) -> str:
        """Write ``claims/<run id>.json`` listing ``shards`` (every key under captures/); returns its key.

        Written once (If-None-Match): a retried launch keeps the claim its trainer may already have
        read; PointerConflict when it exists.
        """
        outside = [c.key for c in shards if not c.key.startswith(self.key("captures") + "/")]
        if outside:
            raise RegistryError(f"refusing to claim outside {self.key('captures')}/: {outside[:3]}")
        body = {"claim_version": CLAIM_VERSION, "run_id": run_id, "created_at": created_at,
                "expires_at": expires_at,
                "shards": [{"key": c.key, "last_modified": c.last_modified, "size": c.size} for c in shards]}
        key = self.claim_key(run_id)
        self._put(key, json.dumps(body).encode(), ContentType="application/json", IfNoneMatch="*")
        return key

    def list_claims(self) -> list[dict[str, Any]]:
        """Every claim object's body (unreadable ones are skipped: they protect nothing)."""
        out = []
        for key in self._list(self.key("claims") + "/"):
            try:
                body = json.loads(self._get(key))
            except (RegistryError, ValueError):
                continue
            if isinstance(body, dict) and key == self.key("claims", f"{body.get('run_id')}.json"):
                out.append(body)
        return out

    def release_claim(self, run_id: str) -> None:
        """Delete the claim of ``run_id`` (absent is fine: S3 deletes are idempotent)."""
        self._delete_under(self.key("claims") + "/", [self.claim_key(run_id)])


def captures_to_prune(captures: list[CaptureObject], limits: CaptureLimits, now: float) -> list[str]:
    """Oldest first: drop what is past retention, then whatever keeps the buffer above a cap."""
    ordered = sorted(captures, key=lambda c: (c.last_modified, c.key))
    samples, size = sum(c.samples for c in ordered), sum(c.size for c in ordered)
    doomed = []
    for c in ordered:
        expired = now - c.last_modified > limits.retention_s
        if not (expired or samples > limits.max_samples or size > limits.max_bytes):
            break
        doomed.append(c.key)
        samples, size = samples - c.samples, size - c.size
    return doomed
