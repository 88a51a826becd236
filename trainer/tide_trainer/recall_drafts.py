"""The drafts a recall evaluation scores, each loaded and checked on its own (issue 16).

A promoted draft (``vN``) is a registry directory ``drafts/vN`` holding ``manifest.json`` and the
files it lists: only those are fetched, and each must match the manifest's sha256 and size, the
manifest must name this version and the target revision (and tokenizer, when both sides know one),
as the serving plugin checks a draft before it loads one. The launch draft (``initial``,
``spec.draft.initial``) has no manifest: it is loaded the way training loads its starting point.
Any failure is a DraftUnavailable naming the draft: the caller skips it and scores the others.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from tide_contracts.registry import MANIFEST_FILE, Manifest
from tide_trainer.candidate import sha256_file
from tide_trainer.export import CONFIG_FILE, WEIGHTS_FILE
from tide_trainer.model import Eagle3Draft
from tide_trainer.starting_point import IncompatibleDraftError, fetch_parent, parent_draft
from tide_trainer.storage import StorageError, download_prefix, is_s3_uri

INITIAL = "initial"  # the launch draft's name in the pool (tide_contracts.recall.POOLED_VERSION)


class DraftUnavailable(RuntimeError):
    """This draft cannot be scored (missing, corrupt, unverified, of another target): it is skipped."""


def load_pooled_draft(version: str, source: str, work_dir: Path, *, target_revision: str,
                      tokenizer_hash: str | None) -> Eagle3Draft:
    """The draft ``version`` from ``source``, verified; raises DraftUnavailable saying why not."""
    dest = work_dir / "drafts" / version
    try:
        if version == INITIAL:
            return parent_draft(fetch_parent(source, dest))
        directory = fetch_promoted(source, dest)
        verify_promoted(directory, version, target_revision, tokenizer_hash)
        return parent_draft(directory)
    except (StorageError, IncompatibleDraftError, OSError) as e:
        raise DraftUnavailable(f"draft {version} ({source}): {e}") from e


def fetch_promoted(source: str, dest: Path) -> Path:
    """A local directory with ``manifest.json`` and the files it lists (downloaded when in S3)."""
    if not is_s3_uri(source):
        return Path(source)
    download_prefix(source, dest, [MANIFEST_FILE])
    names = list(_manifest(dest).files)
    bad = [n for n in names if "/" in n or n.startswith(".")]
    if bad:  # a listed name never leaves the draft's directory
        raise DraftUnavailable(f"draft {source}: {MANIFEST_FILE} lists bad file names {bad}")
    return download_prefix(source, dest, names)


def verify_promoted(directory: Path, version: str, target_revision: str, tokenizer_hash: str | None) -> None:
    """Every listed file's checksum and size, then the version, target revision and tokenizer."""
    manifest = _manifest(directory)
    missing = [n for n in (CONFIG_FILE, WEIGHTS_FILE) if n not in manifest.files]
    if missing:
        raise DraftUnavailable(f"draft {version}: {MANIFEST_FILE} does not list {missing}")
    for name, entry in manifest.files.items():
        path = directory / name
        if not path.is_file():
            raise DraftUnavailable(f"draft {version}: {name} is listed in {MANIFEST_FILE} but missing")
        actual, size = sha256_file(path), path.stat().st_size
        if actual != entry.sha256 or size != entry.bytes:
            raise DraftUnavailable(f"draft {version}: {name} sha256 {actual[:12]}… ({size} bytes) does not "
                                   f"match the manifest's {entry.sha256[:12]}… ({entry.bytes} bytes)")
    if manifest.version != version:
        raise DraftUnavailable(f"draft {version}: its manifest names version {manifest.version!r}")
    if manifest.target_revision != target_revision:
        raise DraftUnavailable(f"draft {version}: trained for target revision {manifest.target_revision!r}, "
                               f"not {target_revision!r}")
    if tokenizer_hash and manifest.tokenizer_hash and manifest.tokenizer_hash != tokenizer_hash:
        raise DraftUnavailable(f"draft {version}: trained with tokenizer {manifest.tokenizer_hash[:12]}…, "
                               f"not {tokenizer_hash[:12]}…")


def _manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST_FILE
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except FileNotFoundError as e:
        raise DraftUnavailable(f"{path}: missing (a promoted draft always has one)") from e
    except ValidationError as e:
        raise DraftUnavailable(f"{path}: not a draft manifest: {e.errors()[0]['msg']}") from e

