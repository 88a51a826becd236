"""S3 (boto3) and local-directory reads and writes for the simulator, loopback only.

The simulator runs in tests: it refuses any S3 endpoint that is not on 127.0.0.0/8 (or localhost)
rather than reach a real cloud, and uses short timeouts so a dead endpoint fails a call, not a pod.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tide_contracts.encryption import S3Encryption


class StorageError(RuntimeError):
    """An object or file could not be read or written; the message names it."""


def split_s3_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise StorageError(f"{uri!r} is not an s3://bucket/prefix URI")
    return parsed.netloc, parsed.path.lstrip("/")


def s3_endpoint() -> str:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    host = urlparse(endpoint).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise StorageError(f"S3 endpoint {endpoint or '(unset)'} is not on loopback; the simulator only "
                           "talks to a local S3 server (set AWS_ENDPOINT_URL)")
    return endpoint


def s3_client() -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=2, read_timeout=10, retries={"max_attempts": 2})
    return boto3.client("s3", endpoint_url=s3_endpoint(), config=config)


def read_bytes(location: str) -> bytes:
    """An s3://bucket/key object or a local file."""
    if not location.startswith("s3://"):
        try:
            return Path(location).read_bytes()
        except OSError as err:
            raise StorageError(f"cannot read {location}: {err}") from err
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = split_s3_uri(location)
    try:
        return s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    except (BotoCoreError, ClientError) as err:
        raise StorageError(f"cannot read {location}: {err}") from err


def put_object(destination: str, key: str, data: bytes, metadata: dict[str, str]) -> str:
    """Write `data` under an s3:// destination prefix (or a local directory); returns where."""
    if not destination.startswith("s3://"):
        path = Path(destination) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = split_s3_uri(destination)
    full_key = f"{prefix.rstrip('/')}/{key}" if prefix.strip("/") else key
    try:
        # The pod's TIDE_S3_SSE settings, as the serving plugin's capture writer applies them.
        encryption = S3Encryption.from_env(os.environ).put_args()
        s3_client().put_object(Bucket=bucket, Key=full_key, Body=data, Metadata=metadata, **encryption)
    except (BotoCoreError, ClientError) as err:
        raise StorageError(f"cannot write s3://{bucket}/{full_key}: {err}") from err
    return f"s3://{bucket}/{full_key}"


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
