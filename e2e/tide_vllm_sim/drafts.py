"""Draft loads as the serving plugin does them: read manifest.json, verify, then "swap".

The simulator has no weights to load: it checks what the plugin checks before touching the engine
(manifest parses, lists config.json and model.safetensors, sha256 of every listed file, version,
target revision) and then serves the new version, whose acceptance the scenario knows.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import ValidationError

from tide_contracts.registry import MANIFEST_FILE, POINTER_FILE, Manifest, PromotedPointer
from tide_contracts.serving_control import ErrorCode
from tide_vllm_sim.s3io import StorageError, join, read_bytes

REQUIRED_FILES = ("config.json", "model.safetensors")


class DraftLoadError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def verify_draft(source: str, expected_version: str | None, target_revision: str,
                 manifest_sha256: str | None = None) -> str:
    """The version `source` holds, after every check the plugin makes; DraftLoadError otherwise."""
    manifest = _manifest(source, manifest_sha256)
    for name in REQUIRED_FILES:
        if name not in manifest.files:
            raise DraftLoadError(ErrorCode.MANIFEST_INVALID, f"{source}: manifest does not list {name}")
    for name, entry in manifest.files.items():
        data = _read(join(source, name), ErrorCode.MANIFEST_INVALID)
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise DraftLoadError(ErrorCode.CHECKSUM_MISMATCH, f"{source}/{name}: sha256 differs from the manifest")
    version = manifest.version or source.rstrip("/").rsplit("/", 1)[-1]
    if expected_version is not None and version != expected_version:
        raise DraftLoadError(ErrorCode.INVALID_REQUEST, f"{source} holds {version}, not {expected_version}")
    if manifest.target_revision != target_revision:
        raise DraftLoadError(ErrorCode.TARGET_REVISION_MISMATCH,
                             f"{source} was trained for {manifest.target_revision}, this pod serves {target_revision}")
    return version


def promoted_source(registry_uri: str) -> tuple[str, str, str | None]:
    """(draft directory, version, manifest sha256 as written at promotion) the registry's promoted.json names."""
    try:
        pointer = PromotedPointer.model_validate_json(read_bytes(join(registry_uri, POINTER_FILE)))
    except (StorageError, ValidationError) as err:
        raise DraftLoadError(ErrorCode.SOURCE_UNAVAILABLE, f"{registry_uri}/{POINTER_FILE}: {err}") from err
    return join(registry_uri, "drafts", pointer.version), pointer.version, pointer.manifest_sha256


def _manifest(source: str, expected_sha256: str | None = None) -> Manifest:
    raw = _read(join(source, MANIFEST_FILE), ErrorCode.SOURCE_UNAVAILABLE)
    if expected_sha256 and hashlib.sha256(raw).hexdigest() != expected_sha256:
        raise DraftLoadError(ErrorCode.CHECKSUM_MISMATCH, f"{source}/{MANIFEST_FILE}: sha256 is not the caller's")
    try:
        return Manifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as err:
        raise DraftLoadError(ErrorCode.MANIFEST_INVALID, f"{source}/{MANIFEST_FILE}: {err}") from err


def _read(location: str, code: ErrorCode) -> bytes:
    try:
        return read_bytes(location)
    except StorageError as err:
        raise DraftLoadError(code, str(err)) from err
