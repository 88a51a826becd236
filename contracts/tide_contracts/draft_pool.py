"""The draft pool (issue 16): drafts that won on a domain once, kept recallable when that domain returns.

`pool.json` under a deployment's registry prefix is an index, not storage: an entry names a promoted
`drafts/vN` (or `initial`, the launch draft) with the domain signature of the traffic it was trained on
and when it was last served. Leaving the index never deletes `drafts/vN` (rollback, history and pins
still need it). The index is bounded: the least recently served entry leaves first; a pinned draft and
the one serving never leave. A new target revision or tokenizer empties it (no draft of the old target
can serve the new one). Pure: the registry reads and writes it with a conditional put.

The signature is a statistic, never rows, so it does not outlive capture retention: per dimension, the
mean and standard deviation of the target's hidden states (projected to a few dimensions by the
trainer) over the captures a draft learnt from, and how many tokens that was.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

POOL_FILE = "pool.json"
POOL_VERSION = 1
DEFAULT_MAX_DRAFTS = 4
_ENTRY_VERSION = r"^(initial|v[1-9][0-9]*)$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DomainSignature(_Frozen):
    """Diagonal Gaussian of the (projected) hidden states a draft learnt from."""

    mean: tuple[float, ...] = Field(min_length=1, max_length=256)
    std: tuple[float, ...] = Field(min_length=1, max_length=256)
    tokens: int = Field(ge=1)
    # How the hidden states were reduced to these dimensions (tide_contracts.signature, as the trainer
    # and the capture writer compute it): signatures of different projections are not comparable.
    projection: str | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _same_dimensions(self) -> DomainSignature:
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean has {len(self.mean)} dimensions, std {len(self.std)}")
        if any(not math.isfinite(v) for v in (*self.mean, *self.std)) or min(self.std) <= 0:
            raise ValueError("mean and std must be finite, std positive")
        return self


class PoolEntry(_Frozen):
    version: str = Field(pattern=_ENTRY_VERSION)
    signature: DomainSignature | None = None  # None: nothing captured yet (a launch draft before any shift)
    added_at: float  # epoch seconds
    last_served_at: float


class DraftPool(_Frozen):
    pool_version: int = POOL_VERSION
    target_revision: str
    tokenizer_hash: str | None = None
    entries: tuple[PoolEntry, ...] = ()

    def entry(self, version: str) -> PoolEntry | None:
        return next((e for e in self.entries if e.version == version), None)


def for_target(pool: DraftPool | None, target_revision: str, tokenizer_hash: str | None) -> DraftPool:
    """The pool for this target: empty when there is none yet or it was kept for another target or tokenizer.

    An unknown tokenizer (None) is not another one: the launch draft is recorded before any manifest names
    the hash, and the first that does is the target revision's own, so the pool keeps its entries and learns it.
    """
    known = pool is not None and None not in (pool.tokenizer_hash, tokenizer_hash)
    if pool is None or pool.target_revision != target_revision or (known and pool.tokenizer_hash != tokenizer_hash):
        return DraftPool(target_revision=target_revision, tokenizer_hash=tokenizer_hash)
    if pool.tokenizer_hash is None and tokenizer_hash is not None:
        return pool.model_copy(update={"tokenizer_hash": tokenizer_hash})
    return pool


def served(pool: DraftPool, version: str, now: float, signature: DomainSignature | None = None,
           *, max_drafts: int = DEFAULT_MAX_DRAFTS, pinned: Collection[str] = ()) -> tuple[DraftPool, list[str]]:
    """``version`` serves from ``now`` (a promotion, a recall, a rollback): added or touched, then the
    pool trimmed to ``max_drafts``. Returns the pool and the versions that left the index.

    A known version keeps its signature unless a new one is given (a recall does not retrain).
    """
    if max_drafts < 1:
        raise ValueError(f"max_drafts must be >= 1, got {max_drafts}")
    known = pool.entry(version)
    if known is None:
        entry = PoolEntry(version=version, signature=signature, added_at=now, last_served_at=now)
    else:
        entry = known.model_copy(update={"last_served_at": now, "signature": signature or known.signature})
    entries = [e for e in pool.entries if e.version != version] + [entry]
    kept, left = _trimmed(entries, max_drafts, protected={version, *pinned})
    return pool.model_copy(update={"entries": tuple(kept)}), left


def _trimmed(entries: list[PoolEntry], max_drafts: int,
             protected: Collection[str]) -> tuple[list[PoolEntry], list[str]]:
    """Least recently served first out; protected entries stay even above the bound (a pin is the user's)."""
    doomed: list[str] = []
    for candidate in sorted(entries, key=lambda e: (e.last_served_at, e.added_at, e.version)):
        if len(entries) - len(doomed) <= max_drafts:
            break
        if candidate.version not in protected:
            doomed.append(candidate.version)
    return [e for e in entries if e.version not in doomed], doomed


def signature_distance(a: DomainSignature, b: DomainSignature) -> float:
    """Symmetric KL divergence between the two diagonal Gaussians, per dimension (0: the same traffic)."""
    if len(a.mean) != len(b.mean):
        raise ValueError(f"signatures of {len(a.mean)} and {len(b.mean)} dimensions cannot be compared")
    if a.projection != b.projection:
        raise ValueError(f"signatures of projections {a.projection!r} and {b.projection!r} cannot be compared")
    total = 0.0
    for ma, sa, mb, sb in zip(a.mean, a.std, b.mean, b.std, strict=True):
        va, vb, d2 = sa * sa, sb * sb, (ma - mb) ** 2
        total += 0.5 * ((va + d2) / vb + (vb + d2) / va) - 1.0
    return total / len(a.mean)


def nearest(pool: DraftPool, signature: DomainSignature, exclude: Sequence[str] = ()) -> list[tuple[str, float]]:
    """Pooled drafts with a signature, nearest to ``signature`` first (the order to evaluate them in)."""
    ranked = [(e.version, signature_distance(e.signature, signature)) for e in pool.entries
              if e.signature is not None and e.version not in exclude
              and len(e.signature.mean) == len(signature.mean) and e.signature.projection == signature.projection]
    return sorted(ranked, key=lambda pair: (pair[1], pair[0]))
