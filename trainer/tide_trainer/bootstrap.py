"""`python -m tide_trainer init`: a freshly initialised EAGLE-3 head for a target that has no draft yet.

A deployment that starts without ``spec.draft.initial`` launches its pods with this head at K=0: no
token is drafted, but the engine computes the auxiliary hidden states, so capture has something to
record and the first real draft can be trained. The head is shaped exactly as the trainer shapes a
fresh draft (the target's widths, embedding, final norm and LM head; one random layer), so a draft
warm-started from it hot-swaps into the pods. Written like a candidate (speculators files, then
``manifest.json`` last, kind ``bootstrap``) to a location the operator chooses; a head already there
for the same target revision is kept (a retried Job changes nothing), one for another revision is
refused (docs/contracts/trainer-cli.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from tide_contracts.registry import MANIFEST_FILE, FileEntry, Manifest, manifest_json
from tide_trainer.candidate import sha256_file
from tide_trainer.config import InitConfig
from tide_trainer.export import export_speculators
from tide_trainer.model import Eagle3Draft
from tide_trainer.starting_point import IncompatibleDraftError, fetch_target, fresh_draft, target_draft_config
from tide_trainer.storage import (
    StorageError,
    check_bucket,
    is_s3_uri,
    join_key,
    parse_s3_uri,
    s3_client,
    upload_files,
)

log = logging.getLogger(__name__)
BOOTSTRAP_KIND = "bootstrap"


@dataclass(frozen=True)
class InitOutcome:
    uri: str
    created: bool  # False: a head for this revision was already there and was kept


def run_init(cfg: InitConfig, client: Any | None = None) -> InitOutcome:
    """Build, export and write the head (or find it already written)."""
    remote = is_s3_uri(cfg.output)
    if remote:
        client = client or s3_client()
        check_bucket(client, parse_s3_uri(cfg.output)[0])
    existing = _existing_manifest(cfg.output, client)
    if existing is not None:
        _check_same_target(existing, cfg)
        log.info("bootstrap head for %s already at %s: kept", cfg.target_revision, cfg.output)
        return InitOutcome(cfg.output, created=False)
    work = Path(cfg.work_dir)
    target_dir = fetch_target(cfg.target_model, work)
    draft_cfg = target_draft_config(target_dir, cfg.aux_layer_ids, None)
    model = fresh_draft(target_dir, draft_cfg, [], cfg.seed)  # full vocabulary: no samples to rank tokens by
    out = Path(cfg.output) if not remote else work / "bootstrap"
    files = export_speculators(model, out, verifier=cfg.verifier_name, speculative_tokens=cfg.speculative_tokens,
                               dtype=cfg.export_dtype)
    manifest = bootstrap_manifest(cfg, model, files)
    if not remote:
        (out / MANIFEST_FILE).write_text(manifest_json(manifest))
        return InitOutcome(str(out), created=True)
    manifest_path = out / MANIFEST_FILE
    manifest_path.write_text(manifest_json(manifest))
    bucket, prefix = parse_s3_uri(cfg.output)
    upload_files(client, bucket, prefix, [*files, manifest_path])  # the manifest last: complete once it exists
    return InitOutcome(cfg.output, created=True)


def bootstrap_manifest(cfg: InitConfig, model: Eagle3Draft, files: list[Path]) -> Manifest:
    draft = {"method": "eagle3", "speculative_tokens": cfg.speculative_tokens,
             "aux_layer_ids": list(model.cfg.aux_layer_ids), "draft_vocab_size": model.cfg.draft_vocab_size,
             "target_hidden_size": model.cfg.target_hidden_size}
    return Manifest(kind=BOOTSTRAP_KIND, run_id=BOOTSTRAP_KIND, created_at=datetime.now(UTC).isoformat(),
                    target_revision=cfg.target_revision, draft=draft,
                    files={p.name: FileEntry(sha256=sha256_file(p), bytes=p.stat().st_size) for p in files})


def _existing_manifest(output: str, client: Any | None) -> Manifest | None:
    """The manifest already at ``output`` (None: nothing complete there yet)."""
    if not is_s3_uri(output):
        path = Path(output) / MANIFEST_FILE
        raw = path.read_bytes() if path.is_file() else None
    else:
        bucket, prefix = parse_s3_uri(output)
        raw = _get_or_none(client, bucket, join_key(prefix, MANIFEST_FILE))
    if raw is None:
        return None
    try:
        return Manifest.model_validate_json(raw)
    except ValidationError as e:
        raise StorageError(f"{output}/{MANIFEST_FILE} exists but is no draft manifest; not overwriting it: "
                           f"{e.errors()[0]['msg']}") from e


def _get_or_none(client: Any, bucket: str, key: str) -> bytes | None:
    try:
        return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise StorageError(f"reading s3://{bucket}/{key}: {e}") from e
    except BotoCoreError as e:
        raise StorageError(f"reading s3://{bucket}/{key}: {e}") from e


def _check_same_target(existing: Manifest, cfg: InitConfig) -> None:
    if existing.kind != BOOTSTRAP_KIND or existing.target_revision != cfg.target_revision:
        raise StorageError(f"{cfg.output} already holds a {existing.kind} draft for target revision "
                           f"{existing.target_revision!r}, not a bootstrap head for {cfg.target_revision!r}; "
                           "not overwriting it")


__all__ = ["BOOTSTRAP_KIND", "IncompatibleDraftError", "InitOutcome", "bootstrap_manifest", "run_init"]
