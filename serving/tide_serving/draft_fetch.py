"""Bring a draft version to a pod-local directory (S3 through boto3, or a local path as is).

Only `manifest.json` and the files it lists are downloaded. S3 settings come from the standard
variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...). Promoted-pointer resolution for startup
lives here too, through the registry module: `<registry>/promoted.json` names the `drafts/vN` to serve.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from tide_contracts.registry import MANIFEST_FILE, DraftRegistry, RegistryError
from tide_contracts.serving_control import ErrorCode
from tide_serving.draft_source import DraftRefused, parse_manifest

KEEP_DOWNLOADS = 3  # the new draft, the serving one and the previous one (restore on failure)


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise DraftRefused(ErrorCode.INVALID_REQUEST, f"{uri!r} is not an s3://bucket/prefix URI")
    return bucket, key.strip("/")


def _s3_client() -> Any:
    import boto3

    return boto3.client("s3")


def _get(client: Any, bucket: str, key: str) -> bytes:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (BotoCoreError, ClientError) as err:
        raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"s3://{bucket}/{key}: {err}") from err


def fetch_draft(source: str, downloads: Path) -> Path:
    """Local directory holding the draft version; S3 sources are downloaded under `downloads`."""
    if not source.startswith("s3://"):
        path = Path(source)
        if not path.is_dir():
            raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"{source}: no such directory on this pod")
        return path
    bucket, prefix = split_s3(source)
    client = _s3_client()
    manifest_bytes = _get(client, bucket, f"{prefix}/{MANIFEST_FILE}")
    names = parse_manifest(manifest_bytes, f"{source}/{MANIFEST_FILE}").files
    target = downloads / hashlib.sha256(manifest_bytes).hexdigest()[:16]
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / MANIFEST_FILE).write_bytes(manifest_bytes)
    for name in names:
        (target / name).write_bytes(_get(client, bucket, f"{prefix}/{name}"))
    prune_downloads(downloads, KEEP_DOWNLOADS)
    return target


def prune_downloads(downloads: Path, keep: int) -> None:
    """Remove all but the `keep` most recently fetched draft directories (pod disk stays bounded)."""
    dirs = sorted((d for d in downloads.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    for old in dirs[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def promoted_source(registry: str, target_revision: str) -> tuple[str, str] | None:
    """(draft version URI, version) that `<registry>/promoted.json` names; None when nothing was
    promoted or the pointer is pinned to another target revision (the contract: "no draft")."""
    bucket, prefix = split_s3(registry)
    try:
        pointer, _ = DraftRegistry(_s3_client(), bucket, prefix).promoted()
    except (RegistryError, ValueError) as err:
        raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"{registry}: promoted.json: {err}") from err
    if pointer is None or pointer.target_revision != target_revision:
        return None
    base = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return f"{base}/drafts/{pointer.version}", pointer.version
