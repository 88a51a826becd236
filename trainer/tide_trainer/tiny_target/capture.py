"""Serve the tiny target in plain torch and capture shards exactly as the serving plugin would.

Requests are prompts cut from a domain's held-out text, continued by the target (temperature sampling,
seeded). Each request's rows carry the target's low/middle/high states (vLLM's layer-id convention),
labels = the next token, loss_mask = "the target chose it" (generated tokens).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from tide_contracts.shards import HiddenStateShard, RequestMeta, ShardHeader, write_shard
from tide_trainer.tiny_target.corpus import DOMAINS
from tide_trainer.tiny_target.model import TinyLlama
from tide_trainer.tiny_target.progress import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaptureSettings:
    prompt_tokens: int = 32
    new_tokens: int = 96
    temperature: float = 0.7
    requests_per_shard: int = 16
    aux_layer_ids: tuple[int, int, int] = (1, 2, 3)
    dtype: str = "bf16"
    seed: int = 0


def domain_prompts(tok: Tokenizer, domain: str, n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """n prompt windows [n, length] drawn from the domain's held-out text (never trained on)."""
    _, held_out = DOMAINS[domain].split()
    stream = torch.tensor([i for text in held_out for i in tok.encode(text).ids], dtype=torch.long)
    starts = torch.randint(0, len(stream) - length, (n,), generator=gen)
    return torch.stack([stream[s:s + length] for s in starts.tolist()])


@torch.no_grad()
def generate(model: TinyLlama, prompts: torch.Tensor, new_tokens: int, temperature: float,
             gen: torch.Generator) -> torch.Tensor:
    """[B, P] -> [B, P + new_tokens], sampling with a KV cache."""
    if prompts.shape[1] + new_tokens > model.c.max_position_embeddings:
        raise ValueError(f"prompt + new tokens exceed max_position_embeddings {model.c.max_position_embeddings}")
    cache: list[list[torch.Tensor]] = [[] for _ in model.model.layers]
    logits, _ = model(prompts, cache=cache)
    seq = prompts
    for _ in range(new_tokens):
        probs = torch.softmax(logits[:, -1].float() / temperature, dim=-1)
        token = torch.multinomial(probs, 1, generator=gen)  # [B, 1]
        seq = torch.cat([seq, token], dim=1)
        logits, _ = model(token, cache=cache)
    return seq


@torch.no_grad()
def capture_rows(model: TinyLlama, seq: torch.Tensor, prompt_len: int,
                 aux_layer_ids: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One forward over finished requests [B, L] -> token_ids, aux [B*L, 3, H], labels, loss_mask."""
    logits, hidden = model(seq, keep_layers=tuple(aux_layer_ids))
    aux = torch.stack(hidden, dim=2)  # [B, L, 3, H]
    last_choice = logits[:, -1].argmax(-1, keepdim=True)  # the target's next token after the last row
    labels = torch.cat([seq[:, 1:], last_choice], dim=1)  # [B, L]
    generated = torch.arange(seq.shape[1]) + 1 >= prompt_len  # labels[t] = token t+1 was generated
    mask = generated.expand_as(seq)
    return (seq.reshape(-1).numpy(), aux.flatten(0, 1).float().numpy(), labels.reshape(-1).numpy(),
            mask.reshape(-1).numpy().copy())


def capture_shard(model: TinyLlama, tok: Tokenizer, info: dict[str, object], *, domain: str, index: int,
                  settings: CaptureSettings,
                  served: tuple[str | None, float | None] = (None, None)) -> HiddenStateShard:
    """Generate one shard of requests from `domain`; served = (draft_version, served_acceptance_rate)."""
    gen = torch.Generator().manual_seed(settings.seed * 1_000_003 + index)
    prompts = domain_prompts(tok, domain, settings.requests_per_shard, settings.prompt_tokens, gen)
    seq = generate(model, prompts, settings.new_tokens, settings.temperature, gen)
    token_ids, aux, labels, mask = capture_rows(model, seq, settings.prompt_tokens, settings.aux_layer_ids)
    revision = str(info["revision"])
    length = seq.shape[1]
    requests = tuple(RequestMeta(f"{domain}-s{settings.seed}-{index}-{r}", revision, served[0], served[1])
                     for r in range(seq.shape[0]))
    header = ShardHeader(target_revision=revision, tokenizer_hash=str(info["tokenizer_hash"]),
                         aux_layer_ids=settings.aux_layer_ids, hidden_size=model.c.hidden_size,
                         dtype=settings.dtype, requests=requests, created_at=datetime.now(UTC).isoformat())
    offsets = np.arange(0, len(requests) * length + 1, length, dtype=np.int64)
    return HiddenStateShard(header=header, token_ids=token_ids.astype(np.int64), aux_hidden_states=aux,
                            labels=labels.astype(np.int64), request_offsets=offsets, loss_mask=mask)


def write_domain_shards(model: TinyLlama, tok: Tokenizer, info: dict[str, object], *, domain: str,
                        out_dir: Path, shards: int, settings: CaptureSettings,
                        first_index: int = 0) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    progress = Progress(f"captured {domain} shard", shards, emit=log.info)
    for i in range(first_index, first_index + shards):
        path = out_dir / f"{domain}-{settings.seed}-{i:05d}.safetensors"
        write_shard(path, capture_shard(model, tok, info, domain=domain, index=i, settings=settings))
        paths.append(path)
        if progress.due(len(paths)):
            progress.report(len(paths))
    return paths
