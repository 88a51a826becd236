"""Read every object's metadata back and say which ones S3 stored without server-side encryption.

The whole-loop e2e runs with ``serverSideEncryption: AES256`` on a bucket without default
encryption, so an object stored plain can only come from a writer that dropped the setting (the
pods' captures, the trainer's candidate, the operator's registry puts and copies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError


@dataclass(frozen=True)
class EncryptionAudit:
    bucket: str
    prefix: str
    keys: tuple[str, ...] = ()  # every object read back
    plain: tuple[str, ...] = ()  # stored without ServerSideEncryption
    other: dict[str, str] = field(default_factory=dict)  # key -> the algorithm, when not the expected one
    bucket_default: str | None = None  # the bucket's default encryption: with one, a plain write goes unseen

    @property
    def ok(self) -> bool:
        return bool(self.keys) and not self.plain and not self.other

    @property
    def checked(self) -> int:
        return len(self.keys)

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}"
        if self.ok:
            return f"{self.checked} objects under {where}, every one encrypted"
        return (f"{self.checked} objects under {where}: {len(self.plain)} without encryption {list(self.plain)[:5]}, "
                f"{len(self.other)} with another algorithm {dict(list(self.other.items())[:5])}")


def audit_encryption(client: Any, bucket: str, prefix: str = "", expected: str = "AES256") -> EncryptionAudit:
    """HEAD every object under ``prefix``; ``expected`` is the algorithm every writer should have asked for."""
    plain: list[str] = []
    other: dict[str, str] = {}
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            algorithm = client.head_object(Bucket=bucket, Key=obj["Key"]).get("ServerSideEncryption")
            keys.append(obj["Key"])
            if not algorithm:
                plain.append(obj["Key"])
            elif algorithm != expected:
                other[obj["Key"]] = algorithm
    return EncryptionAudit(bucket, prefix, tuple(keys), tuple(plain), other, bucket_default(client, bucket))


def bucket_default(client: Any, bucket: str) -> str | None:
    """The algorithm of the bucket's default encryption, None without one."""
    try:
        rules = client.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == "ServerSideEncryptionConfigurationNotFoundError":
            return None
        raise
    return str(rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"]) if rules else None
