"""A candidate draft in the registry: files plus a manifest that pins it to its target and evidence.

Layout and manifest are the registry contract's (tide_contracts.registry, docs/contracts/draft-registry.md):
s3://<bucket>/<prefix>/candidates/<run_id>/{config.json, model.safetensors, eval.json, manifest.json}.
manifest.json is written last, so a candidate without one is incomplete and ignored. The operator
assigns drafts/vN when it promotes.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tide_contracts.draft_pool import DomainSignature
from tide_contracts.registry import MANIFEST_FILE, FileEntry, Manifest, manifest_json
from tide_trainer.storage import (
    StorageError,
    check_bucket,
    join_key,
    object_exists,
    parse_s3_uri,
    s3_client,
    upload_files,
)

CANDIDATES_DIR = "candidates"
_VERSION_DIR = re.compile(r"/drafts/(v[1-9][0-9]*)/?$")
log = logging.getLogger(__name__)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parent_version(parent_uri: str | None) -> str | None:
    """The registry version a parent draft was loaded from (…/drafts/v7 -> v7), else the URI itself."""
    if parent_uri is None:
        return None
    match = _VERSION_DIR.search(parent_uri)
    return match.group(1) if match else parent_uri


def build_manifest(*, run_id: str, files: list[Path], parent: str | None, target_revision: str,
                   tokenizer_hash: str | None, samples: dict[str, int], evaluation: dict[str, Any],
                   draft: dict[str, Any], training_window: tuple[str, str] | None,
                   signature: DomainSignature | None = None) -> Manifest:
    return Manifest(
        kind="candidate", run_id=run_id, created_at=datetime.now(UTC).isoformat(),
        parent=parent_version(parent), target_revision=target_revision, tokenizer_hash=tokenizer_hash,
        training_window=training_window, draft=draft, samples=samples, eval=evaluation, signature=signature,
        files={p.name: FileEntry(sha256=sha256_file(p), bytes=p.stat().st_size) for p in files})


def candidate_uri(registry: str, run_id: str) -> str:
    bucket, prefix = parse_s3_uri(registry)
    return f"s3://{bucket}/{join_key(prefix, CANDIDATES_DIR, run_id)}"


def check_registry(registry: str, run_id: str, client: Any | None = None) -> None:
    """Before training: the registry is reachable and this run's candidate slot is free."""
    bucket, prefix = parse_s3_uri(registry)
    client = client or s3_client()
    check_bucket(client, bucket)
    key = join_key(prefix, CANDIDATES_DIR, run_id, MANIFEST_FILE)
    if object_exists(client, bucket, key):
        raise StorageError(f"s3://{bucket}/{key} already exists; pick a new run_id")


def upload_candidate(registry: str, run_id: str, files: list[Path], manifest: Manifest,
                     client: Any | None = None) -> str:
    """Upload files, then the manifest; refuses to overwrite an existing candidate. Returns its URI."""
    bucket, prefix = parse_s3_uri(registry)
    key_prefix = join_key(prefix, CANDIDATES_DIR, run_id)
    client = client or s3_client()
    if object_exists(client, bucket, join_key(key_prefix, MANIFEST_FILE)):
        raise StorageError(f"s3://{bucket}/{key_prefix} already holds a candidate; pick a new run_id")
    manifest_path = files[0].parent / MANIFEST_FILE
    manifest_path.write_text(manifest_json(manifest))
    try:
        upload_files(client, bucket, key_prefix, [*files, manifest_path])
    except StorageError:
        _remove_partial(client, bucket, key_prefix, [p.name for p in files])
        raise
    return f"s3://{bucket}/{key_prefix}"


def _remove_partial(client: Any, bucket: str, key_prefix: str, names: list[str]) -> None:
    """Best effort: a failed upload leaves no files behind (without a manifest they are ignored anyway)."""
    for name in names:
        try:
            client.delete_object(Bucket=bucket, Key=join_key(key_prefix, name))
        except (BotoCoreError, ClientError):
            log.warning("could not remove partial upload s3://%s/%s", bucket, join_key(key_prefix, name))
