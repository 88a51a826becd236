"""The exported checkpoint has exactly the speculators layout stock vLLM loads, and loads back unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from synthetic_shards import tiny_draft_config

from tide_trainer.export import export_speculators, load_speculators
from tide_trainer.model import Eagle3Draft

H, V, HD = 32, 64, 16


def _expected_shapes(draft_vocab: int) -> dict[str, tuple[int, ...]]:
    return {
        "embed_tokens.weight": (V, H), "fc.weight": (H, 3 * H),
        "layers.0.self_attn.q_proj.weight": (2 * HD, 2 * H), "layers.0.self_attn.k_proj.weight": (HD, 2 * H),
        "layers.0.self_attn.v_proj.weight": (HD, 2 * H), "layers.0.self_attn.o_proj.weight": (H, 2 * HD),
        "layers.0.mlp.gate_proj.weight": (64, H), "layers.0.mlp.up_proj.weight": (64, H),
        "layers.0.mlp.down_proj.weight": (H, 64), "layers.0.input_layernorm.weight": (H,),
        "layers.0.hidden_norm.weight": (H,), "layers.0.post_attention_layernorm.weight": (H,),
        "norm.weight": (H,), "lm_head.weight": (draft_vocab, H),
    }


def test_full_vocab_layout_and_config(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Eagle3Draft(tiny_draft_config())
    export_speculators(model, tmp_path, verifier="/models/tiny", speculative_tokens=3)
    weights = load_file(str(tmp_path / "model.safetensors"))
    assert {k: tuple(v.shape) for k, v in weights.items()} == _expected_shapes(V)  # no d2t at full vocab
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["architectures"] == ["Eagle3DraftModel"]
    assert config["norm_before_residual"] is False  # vLLM would default it to True
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert config["target_hidden_size"] == H
    assert config["draft_vocab_size"] == V
    layer = config["transformer_layer_config"]
    assert layer["num_hidden_layers"] == 1
    assert layer["model_type"] == "llama"
    assert layer["vocab_size"] == V
    assert layer["head_dim"] == HD
    spec = config["speculators_config"]
    assert spec["proposal_methods"][0]["speculative_tokens"] == 3
    assert spec["verifier"]["name_or_path"] == "/models/tiny"
    assert spec["algorithm"] == "eagle3"


def test_reduced_vocab_writes_d2t_and_round_trips(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = Eagle3Draft(tiny_draft_config(draft_vocab_size=16))
    kept = torch.arange(16) * 4
    model.d2t.copy_(kept - torch.arange(16))
    export_speculators(model, tmp_path, verifier="t", speculative_tokens=2)
    weights = load_file(str(tmp_path / "model.safetensors"))
    assert weights["d2t"].dtype == torch.int64
    assert torch.equal(torch.arange(16) + weights["d2t"], kept)  # vLLM: target id = i + d2t[i]
    assert int(weights["t2d"].sum()) == 16
    assert tuple(weights["lm_head.weight"].shape) == (16, H)
    back = load_speculators(tmp_path)
    assert back.cfg == model.cfg
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], tensor, rtol=0, atol=0)


def test_bf16_export_loads_back_close(tmp_path: Path) -> None:
    model = Eagle3Draft(tiny_draft_config())
    export_speculators(model, tmp_path, verifier="t", speculative_tokens=2, dtype="bfloat16")
    assert load_file(str(tmp_path / "model.safetensors"))["fc.weight"].dtype == torch.bfloat16
    back = load_speculators(tmp_path)
    torch.testing.assert_close(back.fc.weight, model.fc.weight, rtol=1e-2, atol=1e-2)


def test_load_rejects_other_layouts(tmp_path: Path) -> None:
    export_speculators(Eagle3Draft(tiny_draft_config()), tmp_path, verifier="t", speculative_tokens=2)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["norm_before_residual"]  # vLLM reads a missing value as True: another architecture
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="norm_before_residual"):
        load_speculators(tmp_path)
