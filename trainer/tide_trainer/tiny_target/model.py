"""A tiny Llama causal LM in plain torch whose state_dict uses Hugging Face's Llama weight names, so the
exported directory loads in vLLM (and transformers) as LlamaForCausalLM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tide_trainer.model import RMSNorm, apply_rope, rope_tables


@dataclass
class TinyLlamaConfig:
    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32  # vLLM's CPU attention supports head_dim 32 but not 16
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 512

    def hf_config(self, eos_token_id: int, dtype: str) -> dict[str, object]:
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **asdict(self),
                "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
                "mlp_bias": False,
                "bos_token_id": eos_token_id, "eos_token_id": eos_token_id, "torch_dtype": dtype,
                "initializer_range": 0.02}


class Attention(nn.Module):
    def __init__(self, c: TinyLlamaConfig) -> None:
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                cache: list[torch.Tensor] | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        c = self.c
        q = self.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2)  # [B, nh, T, hd]
        k = self.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)  # [B, nkv, T, hd]
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        decoding = cache is not None and len(cache) == 2  # one new token after a cached prefix
        if cache is not None:
            if decoding:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=not decoding, enable_gqa=True)  # [B, nh, T, hd]
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c: TinyLlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c: TinyLlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                cache: list[torch.Tensor] | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c: TinyLlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class TinyLlama(nn.Module):
    def __init__(self, c: TinyLlamaConfig) -> None:
        super().__init__()
        self.c = c
        self.model = Backbone(c)  # "model." prefix like HF's LlamaForCausalLM
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids: torch.Tensor, keep_layers: tuple[int, ...] = (),
                cache: list[list[torch.Tensor]] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids [B, T] -> logits [B, T, V] and the residual stream after each layer id in keep_layers.

        Layer id i is the state after i decoder layers (0 = embeddings), vLLM's aux-hidden-state convention.
        cache: one empty list per layer for a prefill, then pass it back with one token per call.
        """
        B, T = ids.shape
        start = cache[0][0].shape[2] if cache and cache[0] else 0
        positions = torch.arange(start, start + T, device=ids.device).expand(B, T)
        rope = rope_tables(positions, self.c.head_dim, self.c.rope_theta)
        x = self.model.embed_tokens(ids)  # [B, T, H]
        kept = {0: x} if 0 in keep_layers else {}
        for i, block in enumerate(self.model.layers, start=1):
            x = block(x, rope, cache[i - 1] if cache is not None else None)
            if i in keep_layers:
                kept[i] = x
        logits = self.lm_head(self.model.norm(x))
        return logits, [kept[i] for i in keep_layers]
