"""Where a training run starts: the served draft (warm start) or a fresh draft shaped after the target."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import load_file

from tide_trainer.data import Sample
from tide_trainer.export import CONFIG_FILE, WEIGHTS_FILE, load_speculators
from tide_trainer.model import DraftConfig, Eagle3Draft
from tide_trainer.storage import download_prefix, is_s3_uri

log = logging.getLogger(__name__)


class IncompatibleDraftError(RuntimeError):
    """The parent draft or the target does not fit the data or the request (exit 5)."""


def fetch_parent(uri: str, work_dir: Path) -> Path:
    """A local copy of the parent draft's directory (downloaded when it lives in S3)."""
    if is_s3_uri(uri):
        return download_prefix(uri, work_dir / "parent", [CONFIG_FILE, WEIGHTS_FILE])
    return Path(uri)


def fetch_target(uri: str, work_dir: Path) -> Path:
    """A local copy of what a fresh draft needs from the target (config and weights)."""
    if is_s3_uri(uri):
        return download_prefix(uri, work_dir / "target", ["config.json", "model.safetensors"])
    path = Path(uri)
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise IncompatibleDraftError(f"target_model: {uri} is not a local HF model dir or s3:// prefix with "
                                     "config.json and model.safetensors")
    return path


def target_draft_config(target_dir: Path, aux_layer_ids: list[int] | None,
                        draft_vocab_size: int | None) -> DraftConfig:
    """A one-layer draft with the target's widths; aux layers default to [1, L/2, L-1]."""
    hf = json.loads((target_dir / "config.json").read_text())
    layers = int(hf["num_hidden_layers"])
    aux = aux_layer_ids or [1, layers // 2, layers - 1]
    if len(aux) != 3 or not all(0 <= i <= layers for i in aux):
        raise IncompatibleDraftError(f"aux_layer_ids: need 3 ids in 0..{layers}, got {aux}")
    return DraftConfig(
        vocab_size=hf["vocab_size"], draft_vocab_size=draft_vocab_size or hf["vocab_size"],
        hidden_size=hf["hidden_size"], target_hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"], num_attention_heads=hf["num_attention_heads"],
        num_key_value_heads=hf.get("num_key_value_heads", hf["num_attention_heads"]),
        head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        rms_norm_eps=hf.get("rms_norm_eps", 1e-5), rope_theta=hf.get("rope_theta", 10000.0),
        max_position_embeddings=hf.get("max_position_embeddings", 2048), aux_layer_ids=aux)


def fresh_draft(target_dir: Path, cfg: DraftConfig, train: list[Sample], seed: int) -> Eagle3Draft:
    """Random layer, the target's embedding (frozen), LM head and final norm copied from the target."""
    torch.manual_seed(seed)
    model = Eagle3Draft(cfg)
    weights = load_file(str(target_dir / "model.safetensors"))
    embed = weights["model.embed_tokens.weight"].float()
    if tuple(embed.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise IncompatibleDraftError(f"target embedding shape {list(embed.shape)} != "
                                     f"[{cfg.vocab_size}, {cfg.hidden_size}]")
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"]).float()
    with torch.no_grad():
        model.embed_tokens.weight.copy_(embed)
        model.norm.weight.copy_(weights["model.norm.weight"].float())
        if model.reduced_vocab:
            kept = most_frequent_targets(train, cfg.draft_vocab_size)
            model.d2t.copy_(kept - torch.arange(cfg.draft_vocab_size))
            model.lm_head.weight.copy_(head[kept])
        else:
            model.lm_head.weight.copy_(head)
    return model


def most_frequent_targets(train: list[Sample], n: int) -> torch.Tensor:
    """The n target tokens the draft should be able to say, sorted by id (ties: lower id first)."""
    counts: Counter[int] = Counter()
    for s in train:
        counts.update(s.labels[s.target_mask].tolist())
    ranked = sorted(range(max(counts, default=0) + 1), key=lambda t: (-counts.get(t, 0), t))
    ranked += [t for t in range(n + len(ranked)) if t not in set(ranked)]  # pad with unseen ids
    return torch.tensor(sorted(ranked[:n]), dtype=torch.long)


def parent_draft(parent_dir: Path) -> Eagle3Draft:
    try:
        return load_speculators(parent_dir)
    except FileNotFoundError as e:
        raise IncompatibleDraftError(f"parent_draft: {e}") from e
    except (KeyError, ValueError) as e:
        raise IncompatibleDraftError(f"parent_draft {parent_dir}: {e}") from e


def check_target_matches_parent(model: Eagle3Draft, target_dir: Path | None) -> None:
    if target_dir is None:
        return
    hf = json.loads((target_dir / "config.json").read_text())
    if hf["hidden_size"] != model.cfg.target_hidden_size or hf["vocab_size"] != model.cfg.vocab_size:
        raise IncompatibleDraftError("parent_draft: its target_hidden_size/vocab_size do not match "
                                     "target_model")
    log.info("parent draft fits target %s", target_dir)
