"""The draft pool's index in the registry: pool.json, replaced only by compare-and-swap (issue 16).

The pool's logic is pure (tide_contracts.draft_pool); this is its I/O, mixed into DraftRegistry.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from botocore.exceptions import ClientError
from pydantic import ValidationError

from tide_contracts.draft_pool import (
    DEFAULT_MAX_DRAFTS,
    POOL_FILE,
    POOL_VERSION,
    DomainSignature,
    DraftPool,
    for_target,
    served,
)
from tide_contracts.registry_store import PointerConflict, RegistryError, RegistryStore, _code

_PROMOTED_VERSION = re.compile(r"v[1-9][0-9]*")


class PoolConflict(RegistryError):
    """pool.json changed (or vanished) between our read and our write: read it again and retry."""


@dataclass
class PoolCache:
    """The last pool.json read, with its bucket, key and ETag: the next read asks If-None-Match and parses
    only an index that changed (the sensors read it every pass while a round may see a return)."""

    source: tuple[str, str] | None = None  # (bucket, key) the ETag is of
    etag: str | None = None
    pool: DraftPool | None = None


class PoolIndex(RegistryStore):
    """pool.json under the registry prefix: read, replace by compare-and-swap, record a served version."""

    pool_cache: PoolCache | None = None  # set by DraftRegistry; None: every read is a whole GET

    def pool(self) -> tuple[DraftPool | None, str | None]:
        """pool.json and its ETag (None, None before the first write).

        An index this version cannot read is an error, never replaced: it may be a newer operator's.
        """
        key = self.key(POOL_FILE)
        cache = self.pool_cache
        condition = ({"IfNoneMatch": cache.etag} if cache is not None and cache.source == (self.bucket, key)
                     and cache.etag else {})
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=key, **condition)
        except ClientError as e:
            if condition and cache is not None and _code(e) in ("304", "NotModified"):
                return cache.pool, cache.etag  # unchanged since the last read: the same index
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise RegistryError(f"reading {key}: {e}") from e
        try:
            pool = DraftPool.model_validate_json(obj["Body"].read())
        except ValidationError as e:
            raise RegistryError(f"{key} is not a draft pool index of pool_version {POOL_VERSION}; "
                                f"left as it is: {e}") from e
        if cache is not None:
            cache.source, cache.etag, cache.pool = (self.bucket, key), obj["ETag"], pool
        return pool, obj["ETag"]

    def replace_pool(self, pool: DraftPool, etag: str | None) -> None:
        """Compare-and-swap: If-Match the ETag read, or If-None-Match: * when there was none. A lost race
        (412, 409, or the object deleted since: 404) raises PoolConflict and writes nothing."""
        key = self.key(POOL_FILE)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            self._put(key, pool.model_dump_json(indent=2).encode(), ContentType="application/json", **condition)
        except PointerConflict as e:
            raise PoolConflict(f"{key} changed since it was read; read it again and retry: {e}") from e
        except RegistryError as e:
            if isinstance(e.__cause__, ClientError) and _code(e.__cause__) in ("NoSuchKey", "404"):
                raise PoolConflict(f"{key} was deleted since it was read; read it again and retry") from e
            raise

    def pooled_manifest_sha256(self, version: str) -> str | None:
        """sha256 of drafts/<version>/manifest.json as stored (what pods verify a recalled draft's fetch against,
        as a pointer's manifest_sha256); None when that version has no manifest. ``version`` must be a vN."""
        if not _PROMOTED_VERSION.fullmatch(version):
            raise RegistryError(f"{version!r} is not a promoted draft version like v3")
        key = self.key("drafts", version, "manifest.json")
        body = self._get_if_present(key)
        return hashlib.sha256(body).hexdigest() if body is not None else None

    def record_served(self, version: str, *, target_revision: str, tokenizer_hash: str | None, now: datetime,
                      signature: DomainSignature | None = None, max_drafts: int = DEFAULT_MAX_DRAFTS,
                      pinned: Collection[str] = (), attempts: int = 3) -> list[str]:
        """``version`` serves from ``now``: added to (or touched in) the pool of this target, which is
        trimmed to ``max_drafts`` (draft_pool.served). Returns the versions that left the index; their
        drafts/vN stay. A lost race is read again and retried; PoolConflict after ``attempts``."""
        for _ in range(attempts):
            current, etag = self.pool()
            pool = for_target(current, target_revision, tokenizer_hash)  # another target: a new, empty pool
            updated, left = served(pool, version, now.timestamp(), signature, max_drafts=max_drafts,
                                   pinned=pinned)
            try:
                self.replace_pool(updated, etag)
            except PoolConflict:
                continue
            return left
        raise PoolConflict(f"{self.key(POOL_FILE)}: lost {attempts} races to concurrent writers; retry later")
