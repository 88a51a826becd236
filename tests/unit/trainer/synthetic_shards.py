"""Synthetic captured shards with learnable structure, small enough for unit tests.

The "target" walks a fixed random permutation of a tiny vocabulary, so the next token is a function of
the current one; its hidden states are noisy projections of the current token's embedding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tide_contracts.shards import HiddenStateShard, RequestMeta, ShardHeader, write_shard
from tide_trainer.model import DraftConfig

VOCAB = 64
HIDDEN = 32
REVISION = "rev-a"
TOKENIZER = "tok-hash"


def tiny_draft_config(**overrides: object) -> DraftConfig:
    base = {"vocab_size": VOCAB, "draft_vocab_size": VOCAB, "hidden_size": HIDDEN,
            "target_hidden_size": HIDDEN,
            "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
            "aux_layer_ids": [1, 2, 3]}
    base.update(overrides)
    return DraftConfig(**base)  # type: ignore[arg-type]


def make_shard(seed: int, *, requests: int = 6, length: int = 24, dtype: str = "fp32",
               revision: str = REVISION, hidden: int = HIDDEN, first_request: int = 0,
               served_rate: float = 0.3, world_seed: int = 1234,
               with_last: bool = False) -> HiddenStateShard:
    """world_seed: the "target" (its permutation and projections); another seed is another traffic domain."""
    world = np.random.default_rng(world_seed)  # the same "target" for every shard
    perm = world.permutation(VOCAB)
    proj = world.normal(size=(3, VOCAB, hidden)).astype(np.float32)
    rng = np.random.default_rng(seed)
    tokens, labels = [], []
    for _ in range(requests):
        tok = [int(rng.integers(VOCAB))]
        for _ in range(length):
            tok.append(int(perm[tok[-1]]))
        tokens.append(tok[:-1])
        labels.append(tok[1:])
    token_ids = np.array(tokens, dtype=np.int64).reshape(-1)
    aux = np.stack([proj[i][token_ids] for i in range(3)], axis=1)
    aux += 0.1 * rng.normal(size=aux.shape).astype(np.float32)
    header = ShardHeader(
        target_revision=revision, tokenizer_hash=TOKENIZER, aux_layer_ids=(1, 2, 3), hidden_size=hidden,
        dtype=dtype, requests=tuple(RequestMeta(f"req-{first_request + r}", revision, "v1", served_rate)
                                    for r in range(requests)))
    return HiddenStateShard(
        header=header, token_ids=token_ids, aux_hidden_states=aux.astype(np.float32),
        labels=np.array(labels, dtype=np.int64).reshape(-1),
        request_offsets=np.arange(0, requests * length + 1, length, dtype=np.int64),
        loss_mask=np.ones(requests * length, dtype=bool),
        last_hidden_states=aux[:, 2].copy() if with_last else None)


def write_buffer(root: Path, shards: int = 3, **kwargs: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        write_shard(root / f"shard-{i:04d}.safetensors",
                    make_shard(i, first_request=100 * i, **kwargs))  # type: ignore[arg-type]
    return root
