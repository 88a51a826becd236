"""Speculators-format checkpoints: the directory stock vLLM loads with `method: eagle3`.

`config.json` + `model.safetensors`, laid out as in vllm-integration.md section 5. The same reader loads
a parent draft to warm-start from, so export and import are tested as a round trip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tide_trainer.model import DraftConfig, Eagle3Draft

SPECULATORS_VERSION = "0.3.0"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def speculators_config(cfg: DraftConfig, *, verifier: str, speculative_tokens: int,
                       dtype: str = "float32") -> dict[str, object]:
    layer = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
    }
    return {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_VERSION,
        "torch_dtype": dtype,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        # vLLM defaults a missing norm_before_residual to True; this draft normalises after the residual
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
        "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                  "accept_tolerance": 0.0, "verifier_accept_k": 1}],
            "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]},
        },
    }


def export_speculators(model: Eagle3Draft, out_dir: str | Path, *, verifier: str, speculative_tokens: int,
                       dtype: str = "float32") -> list[Path]:
    """Write config.json and model.safetensors; returns the files written."""
    if dtype not in _DTYPES:
        raise ValueError(f"export dtype: {dtype!r} is not one of {sorted(_DTYPES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().to("cpu") for k, v in model.state_dict().items() if k != "d2t"}
    weights = {k: v.to(_DTYPES[dtype]).contiguous() for k, v in weights.items()}
    if model.reduced_vocab:
        weights["d2t"] = model.d2t.detach().cpu().clone()
        t2d = torch.zeros(model.cfg.vocab_size, dtype=torch.bool)
        draft_ids = torch.arange(model.cfg.draft_vocab_size, device=model.d2t.device)
        t2d[model.draft_to_target(draft_ids).cpu()] = True
        weights["t2d"] = t2d  # speculators writes it; vLLM ignores it
    config = speculators_config(model.cfg, verifier=verifier, speculative_tokens=speculative_tokens,
                                dtype=dtype)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    save_file(weights, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    return [out / CONFIG_FILE, out / WEIGHTS_FILE]


def draft_config_from_speculators(config: dict[str, Any]) -> DraftConfig:
    kind = config.get("speculators_model_type")
    if kind != "eagle3":
        raise ValueError(f"speculators_model_type: expected 'eagle3', got {kind!r}")
    if config.get("norm_before_residual", True) or config.get("norm_before_fc") or config.get("fc_norm"):
        raise ValueError("norm_before_residual/norm_before_fc/fc_norm: only the plain EAGLE-3 layout "
                         "(all false) is supported")
    layer = config["transformer_layer_config"]
    if not isinstance(layer, dict):
        raise ValueError("transformer_layer_config: must be an object")
    return DraftConfig(
        vocab_size=layer["vocab_size"], draft_vocab_size=int(config["draft_vocab_size"]),
        hidden_size=layer["hidden_size"], target_hidden_size=int(config["target_hidden_size"]),
        intermediate_size=layer["intermediate_size"], num_attention_heads=layer["num_attention_heads"],
        num_key_value_heads=layer["num_key_value_heads"],
        head_dim=layer.get("head_dim", layer["hidden_size"] // layer["num_attention_heads"]),
        rms_norm_eps=layer["rms_norm_eps"], rope_theta=layer.get("rope_theta", 10000.0),
        max_position_embeddings=layer.get("max_position_embeddings", 2048),
        aux_layer_ids=list(config["eagle_aux_hidden_state_layer_ids"]))


def load_speculators(model_dir: str | Path) -> Eagle3Draft:
    """Load a speculators EAGLE-3 checkpoint (e.g. the served draft) as a float32 trainable model."""
    model_dir = Path(model_dir)
    cfg = draft_config_from_speculators(json.loads((model_dir / CONFIG_FILE).read_text()))
    weights = load_file(str(model_dir / WEIGHTS_FILE))
    weights.pop("t2d", None)
    model = Eagle3Draft(cfg)
    if "d2t" not in weights:
        weights["d2t"] = model.d2t
    missing, unexpected = model.load_state_dict({k: v.float() if v.is_floating_point() else v
                                                 for k, v in weights.items()}, strict=False)
    if unexpected or [m for m in missing if m != "embed_tokens.weight"]:
        raise ValueError(f"{model_dir / WEIGHTS_FILE}: missing {missing}, unexpected {unexpected}")
    if missing:
        raise ValueError(f"{model_dir / WEIGHTS_FILE}: embed_tokens.weight is needed to train (the target's "
                         "embedding); export drafts with it")
    return model
