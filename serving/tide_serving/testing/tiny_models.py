"""Tiny local models for the real-engine tests and benchmarks (no hub access; needs torch).

The target is a 4-layer Llama whose attention and MLP output projections are zero, so its residual
stream is the token embedding and it computes a fixed bigram map next = pi(token) (lm_head rows are
permuted embeddings). That makes every draft's acceptance predictable from its weights:

- `good` draft: predicts pi(pi(token)) from the target's aux states, which is exactly the token the
  target will choose after the next one; first-position acceptance ~100%.
- `random` draft: random weights; acceptance ~1/vocab.

and every captured aux hidden state equals the embedding of its token, which the capture tests
check row by row. Sizes: vocab 512, hidden 128, 4 layers, 4 heads (2 KV), head_dim 32, bf16.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers

VOCAB = 512
HIDDEN = 128
LAYERS = 4
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
INTERMEDIATE = 256
AUX_LAYER_IDS = (1, 2, 3)
SPECIALS = ("<unk>", "<s>", "</s>")
NUM_SPEC_TOKENS = 3
TARGET_REVISION = "tiny-bigram-1"
_BUILD_VERSION = "1"  # bump to rebuild cached fixtures after a change here


@dataclass(frozen=True)
class TinyModels:
    target: Path
    good_draft: Path
    random_draft: Path
    other_random_draft: Path
    wide_draft: Path  # incompatible architecture (another aux layer set)


def cache_root() -> Path:
    return Path(os.environ.get("TIDE_CACHE", Path.home() / ".cache" / "tide")) / "models"


def build_tiny_models(root: Path | None = None, seed: int = 0) -> TinyModels:
    """Build (or reuse) the target and the drafts under the cache; returns their directories."""
    base = (root or cache_root()) / f"tiny-llama-v{_BUILD_VERSION}-s{seed}"
    models = TinyModels(base / "target", base / "draft-good", base / "draft-random",
                        base / "draft-random-2", base / "draft-wide")
    if (base / ".complete").exists():
        return models
    gen = torch.Generator().manual_seed(seed)
    embed = torch.randn(VOCAB, HIDDEN, generator=gen)
    perm = _bigram_permutation(gen)
    _write_target(models.target, embed, perm, gen)
    inv2 = torch.argsort(perm[perm])  # inv2[j] = token whose pi(pi(.)) is j
    _write_draft(models.good_draft, _good_draft_weights(embed, inv2, gen), AUX_LAYER_IDS)
    _write_draft(models.random_draft, _random_draft_weights(gen), AUX_LAYER_IDS)
    _write_draft(models.other_random_draft, _random_draft_weights(gen), AUX_LAYER_IDS)
    _write_draft(models.wide_draft, _random_draft_weights(gen), (0, 1, 2))
    (base / ".complete").write_text("ok\n")
    return models


def bigram_next(target_dir: Path) -> list[int]:
    """pi as a list: the token the target emits after each token id."""
    return json.loads((target_dir / "bigram.json").read_text())


def _bigram_permutation(gen: torch.Generator) -> torch.Tensor:
    # Special tokens map to themselves; ordinary tokens never lead to </s>, so generations run long.
    n_special = len(SPECIALS)
    rest = torch.randperm(VOCAB - n_special, generator=gen) + n_special
    return torch.cat([torch.arange(n_special), rest])


def _rand(gen: torch.Generator, *shape: int, scale: float = 0.05) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * scale


def _write_target(out: Path, embed: torch.Tensor, perm: torch.Tensor, gen: torch.Generator) -> None:
    out.mkdir(parents=True, exist_ok=True)
    inv = torch.argsort(perm)  # lm_head row j = embedding of the token whose successor is j
    w: dict[str, torch.Tensor] = {"model.embed_tokens.weight": embed, "lm_head.weight": embed[inv],
                                  "model.norm.weight": torch.ones(HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w |= {p + "self_attn.q_proj.weight": _rand(gen, HEADS * HEAD_DIM, HIDDEN),
              p + "self_attn.k_proj.weight": _rand(gen, KV_HEADS * HEAD_DIM, HIDDEN),
              p + "self_attn.v_proj.weight": _rand(gen, KV_HEADS * HEAD_DIM, HIDDEN),
              p + "self_attn.o_proj.weight": torch.zeros(HIDDEN, HEADS * HEAD_DIM),
              p + "mlp.gate_proj.weight": _rand(gen, INTERMEDIATE, HIDDEN),
              p + "mlp.up_proj.weight": _rand(gen, INTERMEDIATE, HIDDEN),
              p + "mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE),
              p + "input_layernorm.weight": torch.ones(HIDDEN),
              p + "post_attention_layernorm.weight": torch.ones(HIDDEN)}
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(_llama_config(layers=LAYERS, tie=False), indent=2))
    (out / "bigram.json").write_text(json.dumps(perm.tolist()))
    _write_tokenizer(out)


def _llama_config(*, layers: int, tie: bool) -> dict[str, object]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB,
            "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": layers,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
            "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "attention_bias": False, "mlp_bias": False,
            "tie_word_embeddings": tie, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}


def _write_tokenizer(out: Path) -> None:
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab |= {f"w{i}": i for i in range(len(SPECIALS), VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))  # noqa: S106 - a token, not a secret
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 2048, "add_bos_token": False}))


def tokenizer_hash(target_dir: Path) -> str:
    return hashlib.sha256((target_dir / "tokenizer.json").read_bytes()).hexdigest()


def _draft_layer(gen: torch.Generator, *, zero_outputs: bool) -> dict[str, torch.Tensor]:
    out_proj = torch.zeros if zero_outputs else (lambda *s: _rand(gen, *s))
    p = "layers.0."
    return {p + "self_attn.q_proj.weight": _rand(gen, HEADS * HEAD_DIM, 2 * HIDDEN),
            p + "self_attn.k_proj.weight": _rand(gen, KV_HEADS * HEAD_DIM, 2 * HIDDEN),
            p + "self_attn.v_proj.weight": _rand(gen, KV_HEADS * HEAD_DIM, 2 * HIDDEN),
            p + "self_attn.o_proj.weight": out_proj(HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": _rand(gen, INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": _rand(gen, INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": out_proj(HIDDEN, INTERMEDIATE),
            p + "input_layernorm.weight": torch.ones(HIDDEN),
            p + "hidden_norm.weight": torch.ones(HIDDEN),
            p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
            "norm.weight": torch.ones(HIDDEN)}


def _good_draft_weights(embed: torch.Tensor, inv2: torch.Tensor,
                        gen: torch.Generator) -> dict[str, torch.Tensor]:
    # residual = fc(aux) = the low aux state = embedding of the current token; the draft's own
    # lm_head maps it to pi(pi(token)), the token the target emits after the next one.
    fc = torch.cat([torch.eye(HIDDEN), torch.zeros(HIDDEN, 2 * HIDDEN)], dim=1)
    return _draft_layer(gen, zero_outputs=True) | {"fc.weight": fc, "lm_head.weight": embed[inv2]}


def _random_draft_weights(gen: torch.Generator) -> dict[str, torch.Tensor]:
    return _draft_layer(gen, zero_outputs=False) | {
        "fc.weight": _rand(gen, HIDDEN, 3 * HIDDEN), "lm_head.weight": _rand(gen, VOCAB, HIDDEN, scale=1.0)}


def _write_draft(out: Path, weights: dict[str, torch.Tensor], aux_layer_ids: tuple[int, ...]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(draft_config(aux_layer_ids), indent=2))


def draft_config(aux_layer_ids: tuple[int, ...] = AUX_LAYER_IDS) -> dict[str, object]:
    layer = _llama_config(layers=1, tie=False)
    return {
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3",
        "speculators_version": "0.3.0", "torch_dtype": "bfloat16", "draft_vocab_size": VOCAB,
        "target_hidden_size": HIDDEN, "norm_before_residual": False, "norm_before_fc": False,
        "fc_norm": False, "norm_output": False, "eagle_aux_hidden_state_layer_ids": list(aux_layer_ids),
        "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": NUM_SPEC_TOKENS,
                                  "accept_tolerance": 0.0, "verifier_accept_k": 1}],
            "verifier": {"name_or_path": "tiny-llama", "architectures": ["LlamaForCausalLM"]}},
    }


def publish_draft(draft_dir: Path, out: Path, *, version: str, target_revision: str = TARGET_REVISION,
                  tokenizer: str | None = None) -> Path:
    """Copy a draft into a registry-style version directory with its manifest (tide_contracts.registry)."""
    from datetime import UTC, datetime

    from tide_contracts.registry import FileEntry, Manifest, manifest_json

    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in ("config.json", "model.safetensors"):
        data = (draft_dir / name).read_bytes()
        (out / name).write_bytes(data)
        files[name] = FileEntry(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    manifest = Manifest(kind="draft", run_id=f"fixture-{version}", version=version,
                        created_at=datetime.now(UTC).isoformat(), target_revision=target_revision,
                        tokenizer_hash=tokenizer, files=files)
    (out / "manifest.json").write_text(manifest_json(manifest))
    return out
