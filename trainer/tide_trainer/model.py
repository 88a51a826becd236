"""EAGLE-3 draft head, written to match vLLM's `Eagle3LlamaForCausalLM` forward pass exactly.

The draft reads the target's low/middle/high hidden states (concatenated, 3*H_t wide), projects them
with `fc` to H, and runs one Llama decoder layer whose attention input is concat(normed token embedding,
normed hidden) = 2H wide. Its pre-norm output feeds the next draft step (vLLM's `hidden_prenorm`).

Training unrolls K draft steps (test-time training, TTT): step i at anchor t sees the step-0 keys of
positions <= t plus its own chain's keys from steps 1..i, which is exactly what the draft sees at
inference after the target verified position t. Module names equal the speculators weight names.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class DraftConfig:
    """Shape of the draft; mirrors the target's Llama config with one decoder layer."""

    vocab_size: int = 512  # target vocabulary
    draft_vocab_size: int = 512  # < vocab_size: reduced head with a d2t map
    hidden_size: int = 128
    target_hidden_size: int = 128
    intermediate_size: int = 384
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32  # vLLM's CPU attention needs head_dim in {32, 64, 80, ...}
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    aux_layer_ids: list[int] = field(default_factory=lambda: [1, 2, 3])

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for Llama's (neox-style, rotate-half) rotary embedding; positions [B, T] -> [B, 1, T, D]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = positions.float()[..., None] * inv_freq  # [B, T, D/2]
    angles = torch.cat([angles, angles], dim=-1)[:, None]  # [B, 1, T, D]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class DraftAttention(nn.Module):
    """GQA attention over the TTT key cache: causal step-0 keys plus the diagonal keys of later steps."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(2 * cfg.hidden_size, self.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                cache: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        B, T, _ = x.shape  # x: [B, T, 2H]
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # [B, nh, T, hd]
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)  # [B, nkv, T, hd]
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        groups = self.n_head // self.n_kv
        cache.append((k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)))
        scale = 1.0 / math.sqrt(self.head_dim)
        k0, v0 = cache[0]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = (q @ k0.transpose(-1, -2)) * scale  # [B, nh, T, T]
        scores = scores.masked_fill(~causal, float("-inf"))
        diag = [(q * ki).sum(-1, keepdim=True) * scale for ki, _ in cache[1:]]  # each [B, nh, T, 1]
        w = torch.softmax(torch.cat([scores, *diag], dim=-1).float(), dim=-1).to(q.dtype)
        y = w[..., :T] @ v0  # [B, nh, T, hd]
        for j, (_, vj) in enumerate(cache[1:]):
            y = y + w[..., T + j:T + j + 1] * vj
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))


class DraftMLP(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftDecoderLayer(nn.Module):
    """vLLM's Eagle3 LlamaDecoderLayer with norm_before_residual=False."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = DraftMLP(cfg)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                cache: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        residual = hidden  # [B, T, H]
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)  # [B, T, 2H]
        residual = self.self_attn(x, rope, cache) + residual
        return self.mlp(self.post_attention_layernorm(residual)), residual


class Eagle3Draft(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        if cfg.num_attention_heads % cfg.num_key_value_heads:
            raise ValueError("num_attention_heads: must be a multiple of num_key_value_heads")
        if not 0 < cfg.draft_vocab_size <= cfg.vocab_size:
            raise ValueError(f"draft_vocab_size: must be in 1..{cfg.vocab_size}, got {cfg.draft_vocab_size}")
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)  # the target's embedding, frozen
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.layers = nn.ModuleList([DraftDecoderLayer(cfg)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        # draft id -> target id is i + d2t[i] (vLLM's convention); identity when the vocabularies match
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))

    @property
    def reduced_vocab(self) -> bool:
        return self.cfg.draft_vocab_size < self.cfg.vocab_size

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def target_to_draft(self, target_ids: torch.Tensor) -> torch.Tensor:
        """Target ids -> draft ids, -1 where the draft vocabulary lacks the token."""
        t2d = torch.full((self.cfg.vocab_size,), -1, dtype=torch.long, device=target_ids.device)
        draft_ids = torch.arange(self.cfg.draft_vocab_size, device=target_ids.device)
        t2d[self.draft_to_target(draft_ids)] = draft_ids
        return t2d[target_ids]

    def forward(self, aux_hidden: torch.Tensor, input_ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        return self.unroll(aux_hidden, input_ids, steps)

    def unroll(self, aux_hidden: torch.Tensor, input_ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Run `steps` draft steps (TTT); returns logits per step, each [B, T, draft_vocab].

        aux_hidden: [B, T, 3*H_t], the target's states at anchor t.
        input_ids: [B, T + steps - 1], target-vocab tokens; step i at anchor t reads input_ids[:, t + i]
        (the token after anchor t + i, which the target chose) at position t + i.
        """
        B, T, _ = aux_hidden.shape
        hidden = self.fc(aux_hidden)  # [B, T, H]
        positions = torch.arange(T, device=aux_hidden.device).expand(B, T)
        cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        logits = []
        for i in range(steps):
            embeds = self.embed_tokens(input_ids[:, i:i + T])  # [B, T, H]
            rope = rope_tables(positions + i, self.cfg.head_dim, self.cfg.rope_theta)
            out, residual = self.layers[0](embeds, hidden, rope, cache)
            hidden = out + residual  # pre-norm state, the next step's input (vLLM's hidden_prenorm)
            logits.append(self.lm_head(self.norm(hidden)))  # [B, T, draft_vocab]
        return logits
