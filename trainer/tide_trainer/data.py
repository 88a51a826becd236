"""Hidden states in, padded batches out: one interface whether shards sit in a directory or in S3.

The trainer never sees where states came from (the speculators seam): a ShardSource lists and reads
shards, `load_window` keeps the newest N, checks them against the draft, and the rest is tensors.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from tide_contracts.shards import SHARD_SUFFIX, HiddenStateShard, RequestMeta, ShardError, read_shard
from tide_trainer.model import DraftConfig

log = logging.getLogger(__name__)


class NoDataError(RuntimeError):
    """The buffer holds no usable shard (exit 3)."""


class IncompatibleDataError(RuntimeError):
    """Shards were captured for another target, tokenizer or draft shape (exit 5)."""


@dataclass(frozen=True)
class ShardRef:
    name: str  # file name or S3 key
    modified: float  # seconds since the epoch; orders the rolling window
    size: int


class ShardSource(Protocol):
    def list_shards(self) -> list[ShardRef]: ...
    def read_bytes(self, ref: ShardRef) -> bytes: ...


class LocalShardSource:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def list_shards(self) -> list[ShardRef]:
        if not self.root.is_dir():
            raise NoDataError(f"shards: directory {self.root} does not exist")
        return [ShardRef(str(p.relative_to(self.root)), p.stat().st_mtime, p.stat().st_size)
                for p in self.root.rglob(f"*{SHARD_SUFFIX}")]

    def read_bytes(self, ref: ShardRef) -> bytes:
        return (self.root / ref.name).read_bytes()


@dataclass(frozen=True)
class DataExpectations:
    """What every shard must agree with: the draft's shape and the target it was captured from."""

    target_revision: str
    tokenizer_hash: str | None
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...]
    vocab_size: int

    @classmethod
    def for_draft(cls, cfg: DraftConfig, target_revision: str,
                  tokenizer_hash: str | None) -> DataExpectations:
        return cls(target_revision, tokenizer_hash, cfg.target_hidden_size, tuple(cfg.aux_layer_ids),
                   cfg.vocab_size)


def load_window(source: ShardSource, newest: int, expect: DataExpectations) -> list[HiddenStateShard]:
    """Read and check the newest `newest` shards (the rolling buffer the trainer consumes)."""
    refs = sorted(source.list_shards(), key=lambda r: (r.modified, r.name))[-newest:]
    if not refs:
        raise NoDataError("shards: the buffer is empty")
    shards = []
    for ref in refs:
        shard = read_checked(source, ref)
        check_compatible(shard, expect, ref.name)
        shards.append(shard)
    log.info("read %d shards, %d requests, %d tokens", len(shards),
             sum(s.num_requests for s in shards), sum(s.num_tokens for s in shards))
    return shards


def read_checked(source: ShardSource, ref: ShardRef) -> HiddenStateShard:
    """One shard, parsed against the shard contract (a ShardError names the shard)."""
    try:
        return read_shard(source.read_bytes(ref))
    except ShardError as e:
        raise ShardError(f"shard {ref.name}: {e}") from e


def check_compatible(shard: HiddenStateShard, expect: DataExpectations, name: str) -> None:
    check_captured_from(shard, expect.target_revision, expect.tokenizer_hash, name)
    check_fits_draft(shard, expect, name)


def check_captured_from(shard: HiddenStateShard, target_revision: str, tokenizer_hash: str | None,
                        name: str) -> None:
    """The shard was captured from this target revision (and tokenizer, when one is given)."""
    h = shard.header
    if h.target_revision != target_revision:
        raise IncompatibleDataError(f"shard {name}: target_revision {h.target_revision!r} != "
                                    f"expected {target_revision!r}")
    stale = [r.request_id for r in h.requests if r.target_revision != target_revision]
    if stale:
        raise IncompatibleDataError(f"shard {name}: requests {stale[:3]} have another target_revision")
    if tokenizer_hash is not None and h.tokenizer_hash != tokenizer_hash:
        raise IncompatibleDataError(f"shard {name}: tokenizer_hash {h.tokenizer_hash!r} != "
                                    f"expected {tokenizer_hash!r}")


def check_fits_draft(shard: HiddenStateShard, expect: DataExpectations, name: str) -> None:
    """The draft reads this shard: its hidden size, auxiliary layers and vocabulary."""
    h = shard.header
    if h.hidden_size != expect.target_hidden_size:
        raise IncompatibleDataError(f"shard {name}: hidden_size {h.hidden_size} != the draft's "
                                    f"target_hidden_size {expect.target_hidden_size}")
    if tuple(h.aux_layer_ids) != expect.aux_layer_ids:
        raise IncompatibleDataError(f"shard {name}: aux_layer_ids {list(h.aux_layer_ids)} != the draft's "
                                    f"{list(expect.aux_layer_ids)}")
    top = max(int(shard.token_ids.max(initial=0)), int(shard.labels.max(initial=0)))
    if top >= expect.vocab_size:
        raise IncompatibleDataError(f"shard {name}: token id {top} >= the draft's vocab_size "
                                    f"{expect.vocab_size}")


# ---------------------------------------------------------------- requests -> samples


@dataclass(frozen=True)
class Sample:
    """One request (or a max_seq_len slice of it); T rows."""

    aux_hidden: torch.Tensor  # [T, 3*H_t] float32, low|middle|high like vLLM's concatenation
    labels: torch.Tensor  # [T] int64, the target's next token after row t
    target_mask: torch.Tensor  # [T] bool, labels[t] is the target's own choice
    request: RequestMeta


def is_eval_request(request_id: str, eval_fraction: float) -> bool:
    """Stable split by request: the same request lands in the same split in every run and window."""
    digest = hashlib.sha256(request_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


def request_slices(shards: list[HiddenStateShard], max_seq_len: int) -> Iterator[Sample]:
    """Every request of the shards in order, cut into slices of at most ``max_seq_len`` rows."""
    for shard in shards:
        aux = torch.from_numpy(shard.aux_hidden_states).flatten(1)  # [T, 3*H]
        labels = torch.from_numpy(shard.labels)
        mask = torch.ones_like(labels, dtype=torch.bool) if shard.loss_mask is None else \
            torch.from_numpy(shard.loss_mask)
        for r, request in enumerate(shard.header.requests):
            rows = shard.request_rows(r)
            for start in range(rows.start, rows.stop, max_seq_len):
                end = min(start + max_seq_len, rows.stop)
                yield Sample(aux[start:end], labels[start:end], mask[start:end], request)


def split_samples(shards: list[HiddenStateShard], eval_fraction: float,
                  max_seq_len: int) -> tuple[list[Sample], list[Sample]]:
    train: list[Sample] = []
    held_out: list[Sample] = []
    for sample in request_slices(shards, max_seq_len):
        split = held_out if is_eval_request(sample.request.request_id, eval_fraction) else train
        split.append(sample)
    return train, held_out


# ---------------------------------------------------------------- batches


@dataclass(frozen=True)
class Batch:
    aux_hidden: torch.Tensor  # [B, T, 3*H_t]
    labels: torch.Tensor  # [B, T] int64, 0 on padding
    target_mask: torch.Tensor  # [B, T] bool, False on padding

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Batch:
        return Batch(self.aux_hidden.to(device, dtype), self.labels.to(device), self.target_mask.to(device))

    def step_inputs(self, steps: int) -> torch.Tensor:
        """[B, T + steps - 1]: step i at anchor t reads labels[t + i]."""
        return torch.nn.functional.pad(self.labels, (0, steps - 1))

    def step_targets(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Targets of step i: labels[t + i + 1] and whether it is a real target choice; [B, T] each."""
        shift = i + 1
        targets = torch.nn.functional.pad(self.labels[:, shift:], (0, shift))
        valid = torch.nn.functional.pad(self.target_mask[:, shift:], (0, shift))
        return targets, valid


def collate(samples: list[Sample]) -> Batch:
    T = max(s.labels.shape[0] for s in samples)
    B, width = len(samples), samples[0].aux_hidden.shape[1]
    aux = torch.zeros(B, T, width)
    labels = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, s in enumerate(samples):
        n = s.labels.shape[0]
        aux[b, :n], labels[b, :n], mask[b, :n] = s.aux_hidden, s.labels, s.target_mask
    return Batch(aux, labels, mask)


def iter_batches(samples: list[Sample], batch_size: int, generator: torch.Generator | None = None,
                 rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
    """Batches in a seeded shuffled order (or in order without a generator); each rank takes its stride."""
    order = torch.randperm(len(samples), generator=generator).tolist() if generator else range(len(samples))
    order = list(order)
    for start in range(0, len(order), batch_size * world_size):
        mine = order[start + rank * batch_size:start + (rank + 1) * batch_size]
        if mine:
            yield collate([samples[i] for i in mine])
