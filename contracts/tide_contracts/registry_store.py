"""The S3 primitives every part of the draft registry shares (tide_contracts.registry composes them).

One prefix of one bucket over one boto3 client: keys are built under the prefix, every write carries
the registry's encryption settings, and a conditional write that loses raises PointerConflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from tide_contracts.prefix_delete import DeletionRefused, delete_under_prefix


class RegistryError(RuntimeError):
    """The registry refused an operation or S3 failed; the message names the object."""


class PruneIncomplete(RegistryError):
    """S3 refused some keys of a delete; ``deleted`` holds the ones it did delete."""

    def __init__(self, deleted: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.deleted = deleted


class PointerConflict(RegistryError):
    """Someone else changed promoted.json (or took the version) between our read and our write."""


class RegistryStore:
    """Keys and S3 calls under one registry prefix; DraftRegistry sets the attributes."""

    client: Any
    bucket: str
    prefix: str
    _sse: dict[str, str]  # the encryption arguments of every write (encryption.put_args())

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def _put(self, key: str, body: bytes, **extra: Any) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **self._sse, **extra)
        except ClientError as e:
            if _code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise PointerConflict(f"{key} changed concurrently (conditional write lost): {e}") from e
            raise RegistryError(f"writing {key}: {e}") from e

    def _get(self, key: str) -> bytes:
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as e:
            raise RegistryError(f"reading {key}: {e}") from e

    def _get_if_present(self, key: str) -> bytes | None:
        """The object's bytes, None when it does not exist (other errors raise RegistryError)."""
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as e:
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise RegistryError(f"reading {key}: {e}") from e

    def _list_objects(self, prefix: str) -> list[Mapping[str, Any]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [obj for page in pages for obj in page.get("Contents", [])]

    def _list(self, prefix: str) -> list[str]:
        return [obj["Key"] for obj in self._list_objects(prefix)]


    def _delete_under(self, prefix: str, keys: list[str]) -> tuple[str, ...]:
        if not keys:
            return ()
        try:
            outcome = delete_under_prefix(self.client, self.bucket, prefix, keys)
        except DeletionRefused as e:
            raise RegistryError(str(e)) from e
        except ClientError as e:
            raise RegistryError(f"deleting under {prefix}: {e}") from e
        if outcome.failed:
            raise PruneIncomplete(outcome.deleted, f"{len(outcome.deleted)} objects under {prefix} deleted, "
                                  f"{len(outcome.failed)} not: {outcome.describe_failures()}")
        return outcome.deleted


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
