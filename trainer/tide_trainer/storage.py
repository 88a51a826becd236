"""S3 at the edge: listing and reading shards, fetching the parent draft, uploading a candidate.

Credentials and the endpoint come from the standard AWS environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL), read by boto3 itself. Every boto error
becomes a StorageError (exit 6) that says which object failed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import boto3
from boto3.exceptions import Boto3Error
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tide_contracts.encryption import EncryptionSettingsError, S3Encryption
from tide_contracts.shards import SHARD_SUFFIX
from tide_trainer.data import ShardRef


class StorageError(RuntimeError):
    """Object storage failed or holds something unexpected (exit 6)."""


def is_s3_uri(uri: str) -> bool:
    return uri.startswith("s3://")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """s3://bucket/some/prefix -> ("bucket", "some/prefix") without a trailing slash."""
    if not is_s3_uri(uri):
        raise ValueError(f"expected an s3://bucket/prefix URI, got {uri!r}")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r}: the bucket name is empty")
    return bucket, prefix.strip("/")


def s3_client() -> Any:
    # path-style addressing for custom endpoints (MinIO, moto, Ceph); AWS itself takes either
    style = "path" if os.environ.get("AWS_ENDPOINT_URL") else "auto"
    config = Config(s3={"addressing_style": style}, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("s3", config=config)


def join_key(prefix: str, *parts: str) -> str:
    return "/".join(p.strip("/") for p in (prefix, *parts) if p.strip("/"))


class S3ShardSource:
    def __init__(self, uri: str, client: Any | None = None) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.client = client or s3_client()

    def list_shards(self) -> list[ShardRef]:
        refs = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + "/" if self.prefix else "")
            for page in pages:
                for obj in page.get("Contents", []):
                    if obj["Key"].endswith(SHARD_SUFFIX):
                        refs.append(ShardRef(obj["Key"], obj["LastModified"].timestamp(), obj["Size"]))
        except (Boto3Error, BotoCoreError, ClientError) as e:
            raise StorageError(f"listing s3://{self.bucket}/{self.prefix}: {e}") from e
        return refs

    def read_bytes(self, ref: ShardRef) -> bytes:
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=ref.name)["Body"].read())
        except (Boto3Error, BotoCoreError, ClientError) as e:
            raise StorageError(f"reading s3://{self.bucket}/{ref.name}: {e}") from e


class ClaimedShardSource(S3ShardSource):
    """Exactly the shards a claim object lists (the operator's ``claims/<run id>.json``).

    The operator keeps claimed shards from retention pruning while the run lasts, so the trainer
    reads those and no others; every key must lie under the ``shards`` prefix and bucket.
    """

    def __init__(self, shards_uri: str, claim_uri: str, client: Any | None = None) -> None:
        super().__init__(shards_uri, client)
        self.claim_bucket, self.claim_key = parse_s3_uri(claim_uri)

    def list_shards(self) -> list[ShardRef]:
        where = f"s3://{self.claim_bucket}/{self.claim_key}"
        try:
            body = json.loads(self.client.get_object(Bucket=self.claim_bucket, Key=self.claim_key)["Body"].read())
            refs = [ShardRef(str(s["key"]), float(s["last_modified"]), int(s["size"])) for s in body["shards"]]
        except (Boto3Error, BotoCoreError, ClientError) as e:
            raise StorageError(f"reading the shard claim {where}: {e}") from e
        except (ValueError, KeyError, TypeError) as e:
            raise StorageError(f"shard claim {where} is not a claim (claim_version 1): {e}") from e
        outside = [r.name for r in refs if self.claim_bucket != self.bucket or not r.name.startswith(self.prefix + "/")]
        if outside:
            raise StorageError(f"shard claim {where} names shards outside s3://{self.bucket}/{self.prefix}/: "
                               f"{outside[:3]}")
        return [r for r in refs if r.name.endswith(SHARD_SUFFIX)]


def download_prefix(uri: str, dest: Path, names: list[str], client: Any | None = None) -> Path:
    """Fetch the named files under an s3:// prefix into dest (e.g. a draft's config and weights)."""
    bucket, prefix = parse_s3_uri(uri)
    client = client or s3_client()
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        key = join_key(prefix, name)
        try:
            client.download_file(bucket, key, str(dest / name))
        except (Boto3Error, BotoCoreError, ClientError) as e:
            raise StorageError(f"downloading s3://{bucket}/{key}: {e}") from e
    return dest


def object_exists(client: Any, bucket: str, key: str) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise StorageError(f"checking s3://{bucket}/{key}: {e}") from e
    except (Boto3Error, BotoCoreError) as e:
        raise StorageError(f"checking s3://{bucket}/{key}: {e}") from e
    return True


def check_bucket(client: Any, bucket: str) -> None:
    try:
        client.head_bucket(Bucket=bucket)
    except (Boto3Error, BotoCoreError, ClientError) as e:
        raise StorageError(f"bucket {bucket}: {e}") from e


def upload_files(client: Any, bucket: str, prefix: str, files: list[Path],
                 encryption: S3Encryption | None = None) -> list[str]:
    """Upload files in order; returns their keys.

    Every upload carries the server-side encryption the operator set on the Job (TIDE_S3_SSE,
    TIDE_S3_SSE_KMS_KEY_ID; read from the environment unless given): candidates are tenant data.
    """
    try:
        extra = (encryption or S3Encryption.from_env(os.environ)).put_args()
    except EncryptionSettingsError as e:
        raise StorageError(str(e)) from e
    keys = []
    for path in files:
        key = join_key(prefix, path.name)
        try:
            client.upload_file(str(path), bucket, key, ExtraArgs=extra or None)
        except (Boto3Error, BotoCoreError, ClientError, OSError) as e:
            raise StorageError(f"uploading {path} to s3://{bucket}/{key}: {e}") from e
        keys.append(key)
    return keys
