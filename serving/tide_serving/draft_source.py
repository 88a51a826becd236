"""Fetch a draft version and verify it before the engine is touched (no vLLM import).

A draft version is a directory (pod-local or `s3://bucket/prefix/drafts/vN`) holding
`manifest.json` plus the files it lists with their sha256 and size (the registry contract's
`Manifest`, docs/contracts/draft-registry.md). Verification order: manifest present and valid,
every listed file's checksum and size, the requested version, the target revision (and tokenizer
when both sides know it), then the speculators `config.json` against the serving draft's
architecture. Any failure raises
`DraftRefused` with the contract's error code, and nothing has been loaded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tide_contracts.registry import MANIFEST_FILE, Manifest
from tide_contracts.serving_control import ErrorCode

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# Shapes the engine allocated at launch; a draft that differs needs a restart, not a swap.
_LAYER_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                 "head_dim", "num_hidden_layers", "vocab_size")


class DraftRefused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class DraftArchitecture:
    """What must match between the serving draft and a new one for an in-place swap."""

    target_hidden_size: int
    draft_vocab_size: int
    aux_layer_ids: tuple[int, ...]
    layer: tuple[tuple[str, int], ...]  # transformer layer shape fields

    def to_json(self) -> dict[str, Any]:
        return {"target_hidden_size": self.target_hidden_size, "draft_vocab_size": self.draft_vocab_size,
                "aux_layer_ids": list(self.aux_layer_ids), "layer": dict(self.layer)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DraftArchitecture:
        return cls(int(data["target_hidden_size"]), int(data["draft_vocab_size"]),
                   tuple(int(i) for i in data["aux_layer_ids"]),
                   tuple(sorted((str(k), int(v)) for k, v in data["layer"].items())))

    def differences(self, other: DraftArchitecture) -> list[str]:
        diffs = [f"{name}: serving {mine}, new {theirs}" for name, mine, theirs in (
            ("target_hidden_size", self.target_hidden_size, other.target_hidden_size),
            ("draft_vocab_size", self.draft_vocab_size, other.draft_vocab_size),
            ("eagle_aux_hidden_state_layer_ids", list(self.aux_layer_ids), list(other.aux_layer_ids)),
        ) if mine != theirs]
        theirs_layer = dict(other.layer)
        diffs += [f"transformer_layer_config.{k}: serving {v}, new {theirs_layer.get(k)}"
                  for k, v in self.layer if theirs_layer.get(k) != v]
        return diffs


@dataclass(frozen=True)
class VerifiedDraft:
    path: Path
    version: str
    target_revision: str
    architecture: DraftArchitecture


def architecture_from_config(config: dict[str, Any]) -> DraftArchitecture:
    """Read a speculators EAGLE-3 config.json; raises DraftRefused(manifest_invalid) if malformed."""
    try:
        if config.get("speculators_model_type") != "eagle3":
            raise ValueError(f"speculators_model_type is {config.get('speculators_model_type')!r}, "
                             "only 'eagle3' is served")
        layer = config["transformer_layer_config"]
        hidden = int(config.get("target_hidden_size") or layer["hidden_size"])
        head_dim = layer.get("head_dim") or layer["hidden_size"] // layer["num_attention_heads"]
        fields = {**{k: layer.get(k) for k in _LAYER_FIELDS}, "head_dim": head_dim}
        return DraftArchitecture(
            target_hidden_size=hidden,
            draft_vocab_size=int(config.get("draft_vocab_size") or layer["vocab_size"]),
            aux_layer_ids=tuple(int(i) for i in config.get("eagle_aux_hidden_state_layer_ids") or ()),
            layer=tuple(sorted((k, int(v)) for k, v in fields.items() if v is not None)))
    except (KeyError, TypeError, ValueError) as err:
        raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{CONFIG_FILE}: not a speculators EAGLE-3 "
                           f"config ({err})") from err


def architecture_from_hf(hf_config: Any) -> DraftArchitecture:
    """The serving draft's architecture from the engine's parsed draft config (a transformers config)."""
    fields = {k: getattr(hf_config, k, None) for k in _LAYER_FIELDS}
    fields["head_dim"] = fields["head_dim"] or hf_config.hidden_size // hf_config.num_attention_heads
    return DraftArchitecture(
        target_hidden_size=int(getattr(hf_config, "target_hidden_size", None) or hf_config.hidden_size),
        draft_vocab_size=int(getattr(hf_config, "draft_vocab_size", None) or hf_config.vocab_size),
        aux_layer_ids=tuple(int(i) for i in getattr(hf_config, "eagle_aux_hidden_state_layer_ids", ()) or ()),
        layer=tuple(sorted((k, int(v)) for k, v in fields.items() if v is not None)))


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{path.name} is missing from {path.parent}") from err
    except (OSError, ValueError) as err:
        raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{path.name}: cannot be parsed ({err})") from err
    if not isinstance(data, dict):
        raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{path.name}: expected a JSON object")
    return data


def parse_manifest(raw: bytes | dict[str, Any], where: str) -> Manifest:
    """The registry's manifest model (tide_contracts.registry), plus what loading needs."""
    try:
        manifest = Manifest.model_validate_json(raw) if isinstance(raw, bytes) else Manifest.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{where}: {field}: {first['msg']}") from err
    for name in manifest.files:
        if "/" in name or name.startswith("."):
            raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{where}: bad file name {name!r}")
    for required in (CONFIG_FILE, WEIGHTS_FILE):
        if required not in manifest.files:
            raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{where}: does not list {required}")
    return manifest


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify_files(path: Path, manifest: Manifest) -> None:
    for name, entry in manifest.files.items():
        file = path / name
        if not file.is_file():
            raise DraftRefused(ErrorCode.MANIFEST_INVALID, f"{name} is listed in manifest.json but missing")
        actual, size = sha256_of(file), file.stat().st_size
        if actual != entry.sha256 or size != entry.bytes:
            raise DraftRefused(ErrorCode.CHECKSUM_MISMATCH,
                               f"{name}: sha256 {actual[:12]}… ({size} bytes) does not match the manifest's "
                               f"{entry.sha256[:12]}… ({entry.bytes} bytes)")


def verify_draft_dir(path: Path, *, serving_revision: str, serving: DraftArchitecture | None,
                     expected_version: str | None, fallback_version: str,
                     tokenizer_hash: str | None = None) -> VerifiedDraft:
    """All checks, in the contract's order; returns what to load or raises DraftRefused."""
    manifest = parse_manifest(_load_json(path / MANIFEST_FILE), MANIFEST_FILE)
    _verify_files(path, manifest)
    version = manifest.version or fallback_version
    if expected_version is not None and version != expected_version:
        raise DraftRefused(ErrorCode.MANIFEST_INVALID,
                           f"manifest version {version!r} is not the requested {expected_version!r}")
    if manifest.target_revision != serving_revision:
        raise DraftRefused(ErrorCode.TARGET_REVISION_MISMATCH,
                           f"draft was trained for target revision {manifest.target_revision!r}, this pod "
                           f"serves {serving_revision!r}")
    if tokenizer_hash and manifest.tokenizer_hash and manifest.tokenizer_hash != tokenizer_hash:
        raise DraftRefused(ErrorCode.TARGET_REVISION_MISMATCH,
                           f"draft was trained with tokenizer {manifest.tokenizer_hash[:12]}…, this pod "
                           f"serves tokenizer {tokenizer_hash[:12]}…")
    arch = architecture_from_config(_load_json(path / CONFIG_FILE))
    if serving is not None and (diffs := serving.differences(arch)):
        raise DraftRefused(ErrorCode.ARCHITECTURE_MISMATCH,
                           "draft architecture differs from the serving draft (needs a restart): "
                           + "; ".join(diffs))
    return VerifiedDraft(path, version, manifest.target_revision, arch)
