"""The domain signature of captured traffic: the draft pool's key (issue 16).

A diagonal Gaussian of the target's hidden states, projected to SIGNATURE_DIMENSIONS by a fixed
sign matrix, accumulated sample by sample (contract: docs/contracts/draft-registry.md, "signature").
The matrix comes from SHAKE-256, not from a random generator, so every run, machine and numpy version
of a target with the same hidden size projects alike and signatures of different runs compare.
Only statistics leave here, never rows: the signature may outlive the captures' retention.

Two writers, one method: the trainer keeps the signature of a draft's training captures in its
manifest, and the serving plugin writes each capture shard's own signature into the shard object's
S3 metadata, so the operator sees which pooled draft's traffic the newest captures resemble without
reading a row (``merge_signatures`` pools the shards' statistics exactly).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

import numpy as np

from tide_contracts.draft_pool import DomainSignature
from tide_contracts.shards import NUM_AUX_LAYERS

SIGNATURE_DIMENSIONS = 16
PROJECTION = "shake256-sign-rms-v1"  # change the name with the method: old signatures then stay apart
_MIN_STD = 1e-6  # a dimension that never varied (one token) still makes a valid Gaussian
_MIN_RMS = 1e-12


def projection_matrix(width: int, dimensions: int = SIGNATURE_DIMENSIONS) -> np.ndarray:
    """[width, dimensions] of +-1/sqrt(width), the signs being the bits of SHAKE-256 of the method's name."""
    seed = f"tide-domain-signature/{PROJECTION}/{width}x{dimensions}".encode()
    stream = hashlib.shake_256(seed).digest(math.ceil(width * dimensions / 8))
    bits = np.unpackbits(np.frombuffer(stream, dtype=np.uint8))[: width * dimensions]
    return ((2.0 * bits.astype(np.float64) - 1.0) / math.sqrt(width)).reshape(width, dimensions)


class SignatureAccumulator:
    """Streaming mean and variance of the projected hidden states (Chan et al.'s pairwise merge).

    Each layer is projected first and divided by its RMS after (the projection is linear), in float32
    like the captured states; the running statistics are float64.
    """

    def __init__(self, hidden_size: int, dimensions: int = SIGNATURE_DIMENSIONS) -> None:
        self.hidden_size = hidden_size
        width = NUM_AUX_LAYERS * hidden_size
        # [layers, H, d]: the rows of the whole matrix that each layer's slice of a row meets
        self.projection = projection_matrix(width, dimensions).astype(np.float32).reshape(
            NUM_AUX_LAYERS, hidden_size, dimensions)
        self.tokens = 0
        self.mean = np.zeros(dimensions)
        self.m2 = np.zeros(dimensions)  # sum of squared deviations from the mean

    def add(self, aux_hidden: np.ndarray) -> None:
        """Rows of captured tokens: [T, 3*H] (low|middle|high, as the trainer's samples) or [T, 3, H]."""
        rows = np.asarray(aux_hidden, dtype=np.float32).reshape(-1, NUM_AUX_LAYERS, self.hidden_size)
        n = rows.shape[0]
        if n == 0:
            return
        rms = np.sqrt(np.einsum("tlh,tlh->tl", rows, rows, dtype=np.float64) / self.hidden_size)  # [T, 3]
        projected = np.zeros((n, self.projection.shape[-1]))  # [T, d]
        for layer in range(NUM_AUX_LAYERS):
            projected += (rows[:, layer] @ self.projection[layer]) / np.maximum(rms[:, layer:layer + 1], _MIN_RMS)
        self._merge(n, projected.mean(axis=0), ((projected - projected.mean(axis=0)) ** 2).sum(axis=0))

    def _merge(self, n: int, mean: np.ndarray, m2: np.ndarray) -> None:
        total = self.tokens + n
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.tokens * n / total
        self.mean += delta * n / total
        self.tokens = total

    def signature(self) -> DomainSignature | None:
        """None before any token (nothing to describe)."""
        if self.tokens == 0:
            return None
        std = np.maximum(np.sqrt(self.m2 / self.tokens), _MIN_STD)
        return DomainSignature(mean=tuple(float(v) for v in self.mean), std=tuple(float(v) for v in std),
                               tokens=self.tokens, projection=PROJECTION)


def domain_signature(rows: Iterable[np.ndarray], hidden_size: int) -> DomainSignature | None:
    """The signature of every row in ``rows`` (each a [T, 3*H] block, consumed one at a time)."""
    accumulator = SignatureAccumulator(hidden_size)
    for block in rows:
        accumulator.add(block)
    return accumulator.signature()


def merge_signatures(parts: Iterable[DomainSignature]) -> DomainSignature | None:
    """One signature of the union of the parts' tokens (exact: pooled means and variances).

    None when there is nothing to merge; ValueError for parts of other projections or dimensions.
    """
    parts = list(parts)
    if not parts:
        return None
    first = parts[0]
    for part in parts[1:]:
        if part.projection != first.projection or len(part.mean) != len(first.mean):
            raise ValueError(f"cannot merge signatures of {first.projection!r} x{len(first.mean)} "
                             f"and {part.projection!r} x{len(part.mean)}")
    tokens = np.array([p.tokens for p in parts], dtype=np.float64)
    means = np.array([p.mean for p in parts])
    variances = np.array([p.std for p in parts]) ** 2
    total = tokens.sum()
    mean = tokens @ means / total
    variance = tokens @ (variances + (means - mean) ** 2) / total
    std = np.maximum(np.sqrt(variance), _MIN_STD)
    return DomainSignature(mean=tuple(float(v) for v in mean), std=tuple(float(v) for v in std),
                           tokens=int(total), projection=first.projection)


# A capture object's S3 user metadata (2 KiB for all keys together, ASCII): "<tokens>;<means>;<stds>",
# comma-separated, 6 significant digits (16 dimensions: about 330 bytes). The projection is this
# module's: a reader with another method does not take it for its own.
_METADATA_DIGITS = 6
_METADATA_MAX_CHARS = 1536


def signature_to_metadata(signature: DomainSignature) -> str:
    if signature.projection != PROJECTION:
        raise ValueError(f"only {PROJECTION} signatures go into capture metadata, not {signature.projection!r}")
    values = [",".join(f"{v:.{_METADATA_DIGITS}g}" for v in column) for column in (signature.mean, signature.std)]
    return f"{signature.tokens};{values[0]};{values[1]}"


def signature_from_metadata(text: str | None) -> DomainSignature | None:
    """The signature a capture object's metadata carries; None when absent or not well formed.

    The metadata is written by serving pods, which run the tenant's image: whatever it says is parsed
    as numbers of a bounded size and validated, never trusted to be there or to make sense.
    """
    if not text or len(text) > _METADATA_MAX_CHARS:
        return None
    try:
        tokens, means, stds = text.split(";")
        return DomainSignature(mean=tuple(float(v) for v in means.split(",")),
                               std=tuple(float(v) for v in stds.split(",")), tokens=int(tokens),
                               projection=PROJECTION)
    except ValueError:  # pydantic's ValidationError is one
        return None
