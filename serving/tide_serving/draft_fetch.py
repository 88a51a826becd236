"""Bring a draft version to a pod-local directory (S3 through boto3, or a local path as is).

Only `manifest.json` and the files it lists are downloaded, except for the pod's launch draft
(`fetch_launch_draft`): the engine loaded it at launch without a manifest, so going back to it
fetches the files it loaded. S3 settings come from the standard
variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...). Promoted-pointer resolution for startup
lives here too, through the registry module: `<registry>/promoted.json` names the `drafts/vN` to serve.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from tide_contracts.registry import LAUNCH_DRAFT, MANIFEST_FILE, DraftRegistry, RegistryError
from tide_contracts.serving_control import ErrorCode
from tide_serving.draft_source import DraftRefused, parse_manifest

KEEP_DOWNLOADS = 3  # the new draft, the serving one and the previous one (restore on failure)
MAX_MANIFEST_BYTES = 1 << 20  # a manifest lists a few files; anything larger is not one
CHUNK = 1 << 20


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise DraftRefused(ErrorCode.INVALID_REQUEST, f"{uri!r} is not an s3://bucket/prefix URI")
    return bucket, key.strip("/")


def _s3_client() -> Any:
    import boto3

    return boto3.client("s3")


def _download(client: Any, bucket: str, key: str, dest: Path, limit: int) -> int:
    """Stream one object to ``dest`` (never whole in memory); refused past ``limit`` bytes."""
    from botocore.exceptions import BotoCoreError, ClientError

    written = 0
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        with dest.open("wb") as out:
            for chunk in body.iter_chunks(CHUNK):
                written += len(chunk)
                if written > limit:
                    raise DraftRefused(ErrorCode.CHECKSUM_MISMATCH, f"s3://{bucket}/{key}: larger than the "
                                       f"{limit} bytes the manifest lists; download stopped")
                out.write(chunk)
    except (BotoCoreError, ClientError) as err:
        raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"s3://{bucket}/{key}: {err}") from err
    return written


def fetch_draft(source: str, downloads: Path) -> Path:
    """Local directory holding the draft version; S3 sources are downloaded under `downloads`."""
    if not source.startswith("s3://"):
        path = Path(source)
        if not path.is_dir():
            raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"{source}: no such directory on this pod")
        return path
    bucket, prefix = split_s3(source)
    client = _s3_client()
    downloads.mkdir(parents=True, exist_ok=True)
    staging = downloads / ".manifest"
    _download(client, bucket, f"{prefix}/{MANIFEST_FILE}", staging, MAX_MANIFEST_BYTES)
    manifest_bytes = staging.read_bytes()
    files = parse_manifest(manifest_bytes, f"{source}/{MANIFEST_FILE}").files
    target = downloads / hashlib.sha256(manifest_bytes).hexdigest()[:16]
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    staging.replace(target / MANIFEST_FILE)
    for name, entry in files.items():  # each file bounded by the size the manifest gives it
        _download(client, bucket, f"{prefix}/{name}", target / name, entry.bytes)
    prune_downloads(downloads, KEEP_DOWNLOADS)
    return target


def fetch_launch_draft(source: str, downloads: Path) -> Path:
    """Local directory holding the files the engine loaded at launch from ``source``.

    A local path is used as is; S3: every object directly under the prefix (there is no manifest
    to list them), kept as ``launch-<hash>`` and reused; a Hugging Face id: the snapshot vLLM
    downloaded at launch, from the local cache only (pods need not reach the hub again).
    """
    source = source.rstrip("/")
    if source.startswith("s3://"):
        return _fetch_s3_prefix(source, downloads / f"launch-{hashlib.sha256(source.encode()).hexdigest()[:16]}")
    path = Path(source)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, local_files_only=True))
    except Exception as err:  # ImportError, not cached, not a repo id: all mean "not on this pod"
        raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE,
                           f"{source}: the launch draft is neither a directory nor in this pod's model cache: "
                           f"{err}") from err


def _fetch_s3_prefix(source: str, target: Path) -> Path:
    from botocore.exceptions import BotoCoreError, ClientError

    if (target / ".complete").is_file():
        return target
    bucket, prefix = split_s3(source)
    client = _s3_client()
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/", Delimiter="/")
        objects = [(obj["Key"], int(obj["Size"])) for page in pages for obj in page.get("Contents", [])]
    except (BotoCoreError, ClientError) as err:
        raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"{source}: listing the launch draft: {err}") from err
    if not objects:
        raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"{source}: no objects under the launch draft's prefix")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for key, size in objects:  # no manifest: bounded by the listed size
        _download(client, bucket, key, target / key.rsplit("/", 1)[-1], size)
    (target / ".complete").touch()  # a partial copy from a failed fetch is fetched again
    return target


def prune_downloads(downloads: Path, keep: int) -> None:
    """Remove all but the `keep` most recently fetched draft directories (pod disk stays bounded)."""
    # The launch draft's copy is not a version download: it is kept for the next rollback.
    dirs = sorted((d for d in downloads.iterdir() if d.is_dir() and not d.name.startswith("launch-")),
                  key=lambda d: d.stat().st_mtime)
    for old in dirs[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def promoted_source(registry: str, target_revision: str) -> tuple[str, str, str | None] | None:
    """(draft version URI, version, the manifest's sha256 as the operator wrote it) that
    `<registry>/promoted.json` names; None when nothing was promoted, the pointer is pinned to another
    target revision (the contract: "no draft"), or it names the launch draft the pod already serves."""
    bucket, prefix = split_s3(registry)
    try:
        pointer, _ = DraftRegistry(_s3_client(), bucket, prefix).promoted()
    except (RegistryError, ValueError) as err:
        raise DraftRefused(ErrorCode.SOURCE_UNAVAILABLE, f"{registry}: promoted.json: {err}") from err
    if pointer is None or pointer.target_revision != target_revision or pointer.version == LAUNCH_DRAFT:
        return None
    base = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return f"{base}/drafts/{pointer.version}", pointer.version, pointer.manifest_sha256
