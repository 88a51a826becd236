"""Deletes that stay under one deployment's prefix and report every key S3 did not delete.

Every delete the operator makes goes through ``delete_under_prefix``: a key outside the prefix
refuses the whole call before any request (a bug or a crafted listing never reaches another
tenant's data), and ``delete_objects``' per-key ``Errors`` come back as failures instead of being
counted as deleted (the call itself answers 200 when some keys fail).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_KEYS_PER_REQUEST = 1000  # the S3 limit of one DeleteObjects request


class DeletionRefused(RuntimeError):
    """A key lies outside the prefix (or the prefix is empty): nothing was deleted."""


@dataclass(frozen=True)
class DeleteOutcome:
    deleted: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)  # key -> "Code: Message" from S3

    def describe_failures(self, limit: int = 3) -> str:
        shown = [f"{key} ({why})" for key, why in list(self.failed.items())[:limit]]
        more = len(self.failed) - len(shown)
        return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def lies_under(key: str, prefix: str) -> bool:
    """True when ``key`` is inside ``prefix/`` (pure). ``.``/``..`` segments are refused: some
    S3-compatible stores normalise them, which would step out of the prefix."""
    if not prefix.endswith("/") or prefix == "/" or not key.startswith(prefix) or key == prefix:
        return False
    return not any(segment in (".", "..") for segment in key.split("/"))


def keys_outside(keys: Iterable[str], prefix: str) -> list[str]:
    return [key for key in keys if not lies_under(key, prefix)]


def delete_under_prefix(client: Any, bucket: str, prefix: str, keys: Sequence[str]) -> DeleteOutcome:
    """Delete ``keys`` (all under ``prefix``, which ends with ``/``) in batches; botocore errors propagate."""
    if not prefix.endswith("/") or not prefix.strip("/"):
        raise DeletionRefused(f"refusing to delete under {prefix!r}: a deployment prefix ends with '/'")
    outside = keys_outside(keys, prefix)
    if outside:
        raise DeletionRefused(f"refusing to delete outside s3://{bucket}/{prefix}: {outside[:3]}")
    deleted: list[str] = []
    failed: dict[str, str] = {}
    for start in range(0, len(keys), MAX_KEYS_PER_REQUEST):
        batch = list(keys[start:start + MAX_KEYS_PER_REQUEST])
        answer = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
        errors = {e.get("Key", ""): f"{e.get('Code', '?')}: {e.get('Message', '')}" for e in answer.get("Errors", [])}
        failed.update(errors)
        deleted += [key for key in batch if key not in errors]
    return DeleteOutcome(tuple(deleted), failed)
