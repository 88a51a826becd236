"""The trainer's one typed configuration: every CLI flag and config-file key.

Contract: docs/contracts/trainer-cli.md.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tide_contracts.recall import POOLED_VERSION, RECALL_REPORT_FILE

# The recall report's run id is at most 63 characters (tide_contracts.recall.RecallReport).
RECALL_RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
MAX_POOLED = 64  # RecallReport.scores holds at most this many


def _default_run_id() -> str:
    return datetime.now(UTC).strftime("run-%Y%m%dT%H%M%SZ")


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # --- what to learn from
    shards: str = Field(description="Hidden-state shards: a local directory or s3://bucket/prefix")
    window_shards: int = Field(4096, ge=1, description="Train on the newest N shards (the rolling buffer)")
    shard_claim: str | None = Field(
        None, description="s3:// URI of a claim object listing the shards to read (instead of listing shards)")
    target_revision: str = Field(description="Target revision every shard must have been captured from")
    tokenizer_hash: str | None = Field(None, description="sha256 of tokenizer.json; shards must match if set")
    eval_fraction: float = Field(0.1, gt=0, lt=1, description="Share of requests held out (split by request)")
    max_seq_len: int = Field(512, ge=2, description="Requests longer than this are cut into slices")

    # --- what to start from
    parent_draft: str | None = Field(None, description="Served draft to warm-start from (dir or s3:// URI)")
    target_model: str | None = Field(
        None, description="HF Llama target dir; a fresh draft takes its config and embedding")
    aux_layer_ids: list[int] | None = Field(None, description="Fresh draft only; default [1, L/2, L-1]")
    draft_vocab_size: int | None = Field(None, ge=1, description="Fresh draft only; < vocab adds d2t")

    # --- how to train (defaults: the TIDE fork's streaming trainer)
    ttt_steps: int = Field(7, ge=1, description="Test-time-training unroll length")
    loss_decay: float = Field(0.8, gt=0, le=1, description="Weight of step i is loss_decay**i")
    lr: float = Field(1e-4, gt=0, description="Constant AdamW learning rate")
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(0.5, gt=0)
    batch_size: int = Field(8, ge=1, description="Request slices per step and process")
    epochs: int = Field(10, ge=1)
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps")
    seed: int = 0
    precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="auto: bf16 on CUDA, fp32 on CPU")
    log_every: int = Field(10, ge=1)
    checkpoint_every: int = Field(200, ge=1)

    # --- how to judge and ship
    speculative_tokens: int = Field(3, ge=1, description="K drafted tokens per step, for acceptance length")
    min_improvement: float = Field(0.0, ge=0, description="Acceptance-length gain over the baseline needed")
    registry: str | None = Field(None, description="s3://bucket/prefix of the registry, None: no upload")
    run_id: str = Field(default_factory=_default_run_id, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    work_dir: str = Field("tide-train", description="Checkpoints, the exported candidate, the report")
    report_path: str | None = Field(None, description="Evaluation report JSON; default <work_dir>/eval.json")
    export_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    verifier_name: str = Field("target", description="verifier.name_or_path written into config.json")

    @model_validator(mode="after")
    def _needs_a_starting_point(self) -> TrainConfig:
        if self.parent_draft is None and self.target_model is None:
            raise ValueError("parent_draft or target_model: one is required to build the draft")
        if self.shard_claim is not None and not (self.shard_claim.startswith("s3://")
                                                 and self.shards.startswith("s3://")):
            raise ValueError("shard_claim: needs s3:// URIs for both shard_claim and shards")
        if self.registry is not None and not self.registry.startswith("s3://"):
            raise ValueError(f"registry: expected s3://bucket/prefix, got {self.registry!r}")
        return self

    @property
    def report_file(self) -> Path:
        return Path(self.report_path) if self.report_path else Path(self.work_dir) / "eval.json"


class InitConfig(BaseModel):
    """`tide_trainer init`: a freshly initialised draft for the target (docs/contracts/trainer-cli.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_model: str = Field(description="HF Llama target: local dir or s3:// prefix with config.json and "
                              "model.safetensors")
    target_revision: str = Field(description="Target revision the head is pinned to (its manifest says so)")
    output: str = Field(description="Where the head goes: a local directory or s3://bucket/prefix (the operator: "
                        "<registry>/bootstrap/<key>); an existing head of another revision is never overwritten")
    aux_layer_ids: list[int] | None = Field(None, description="Default [1, L/2, L-1]")
    speculative_tokens: int = Field(3, ge=1, description="K written into config.json")
    seed: int = Field(0, description="Initialisation seed: the same inputs give the same head")
    work_dir: str = Field("tide-init", description="Local export before the upload")
    export_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    verifier_name: str = Field("target", description="verifier.name_or_path written into config.json")


class RecallConfig(BaseModel):
    """`tide_trainer recall`: score the served and the pooled drafts on the captures since a shift
    (issue 16; docs/contracts/trainer-cli.md). No training: the report is the only output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shards: str = Field(description="Hidden-state shards: a local directory or s3://bucket/prefix")
    shard_claim: str | None = Field(
        None, description="s3:// URI of a claim object listing the shards to read (instead of listing shards)")
    target_revision: str = Field(description="Target revision every shard and every promoted draft must have")
    tokenizer_hash: str | None = Field(None, description="sha256 of tokenizer.json; shards must match if set")
    max_seq_len: int = Field(512, ge=2, description="Requests longer than this are cut into slices")
    max_eval_tokens: int = Field(32768, ge=1, description="Score on at most this many captured tokens, newest "
                                 "shards first (bounds the Job to minutes)")
    captured_since: float | None = Field(None, description="The claim's start (epoch s): the shift the samples "
                                         "follow; recorded in the report")
    served_draft: str | None = Field(None, description="VERSION=SOURCE of the served draft (VERSION: initial or "
                                     "vN); none: nothing served, the baseline is no speculation (1.0)")
    pooled_drafts: list[str] = Field(default_factory=list, description="VERSION=SOURCE of a pooled draft; repeat "
                                     "the flag for each")
    speculative_tokens: int = Field(3, ge=1, description="K drafted tokens per step, as in training")
    batch_size: int = Field(8, ge=1, description="Request slices per evaluation batch")
    registry: str = Field(description="s3://bucket/prefix of the registry: the report goes to "
                          "candidates/<run_id>/recall.json")
    run_id: str = Field(pattern=RECALL_RUN_ID)
    work_dir: str = Field("tide-recall", description="Downloaded drafts and the local copy of the report")

    @model_validator(mode="after")
    def _drafts_named_once(self) -> RecallConfig:
        if not self.registry.startswith("s3://"):
            raise ValueError(f"registry: expected s3://bucket/prefix, got {self.registry!r}")
        if self.shard_claim is not None and not (self.shard_claim.startswith("s3://")
                                                 and self.shards.startswith("s3://")):
            raise ValueError("shard_claim: needs s3:// URIs for both shard_claim and shards")
        pooled = [draft_reference(raw) for raw in self.pooled_drafts]
        served = draft_reference(self.served_draft) if self.served_draft else None
        versions = [v for v, _ in pooled]
        if not 0 < len(pooled) <= MAX_POOLED or len(set(versions)) != len(versions) or (
                served and served[0] in versions):
            raise ValueError(f"pooled_drafts: need 1 to {MAX_POOLED}, each version once and never the served "
                             f"one; got {versions} (served: {served[0] if served else None})")
        return self

    @property
    def served(self) -> tuple[str, str] | None:
        return draft_reference(self.served_draft) if self.served_draft else None

    @property
    def pooled(self) -> list[tuple[str, str]]:
        return [draft_reference(raw) for raw in self.pooled_drafts]

    @property
    def report_file(self) -> Path:
        return Path(self.work_dir, RECALL_REPORT_FILE)


def draft_reference(raw: str) -> tuple[str, str]:
    """``VERSION=SOURCE`` -> (version, source); the version is ``initial`` or ``vN`` (the pool's names)."""
    version, sep, source = raw.partition("=")
    if not sep or not re.fullmatch(POOLED_VERSION, version) or not source:
        raise ValueError(f"draft {raw!r}: expected VERSION=SOURCE with VERSION initial or vN")
    return version, source


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON config file into a dict (validated by TrainConfig, not here)."""
    text = Path(path).read_text()
    data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the config file must hold a mapping of keys to values")
    return data
