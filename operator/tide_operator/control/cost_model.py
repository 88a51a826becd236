"""The speculative-decoding cost model (TIDE Eq. 5) and the choice of speculative tokens.

practical speedup = (1 - a^(g+1)) / ((1 - a) (c(b) g + beta(b, g)))

a: acceptance rate per drafted token, g: speculative tokens, c(b): draft step cost over target
step cost at batch size b, beta(b, g): verify cost T(b(g+1)) / T(b). g = 0 means no speculation
(speedup exactly 1).

A CostProfile holds measured points (batch_size, draft_cost, verify_cost) with verify_cost taken
at the profile's reference g (TIDE profiles with g = 3). For another g we assume an affine target
latency T(n) = T0 + k n, under which beta(b, g) - 1 is proportional to g; beta never exceeds g + 1
(fully compute-bound: every drafted token costs a full target token).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

REFERENCE_SPECULATIVE_TOKENS = 3  # TIDE's fixed gamma, also the g of its verify-cost profile (Fig. 6)


def expected_acceptance_length(acceptance_rate: float, speculative_tokens: int) -> float:
    """Tokens produced per verify step, bonus token included: (1 - a^(g+1)) / (1 - a)."""
    _check_rate(acceptance_rate)
    if speculative_tokens < 0:
        raise ValueError(f"speculative_tokens must be >= 0, got {speculative_tokens}")
    if math.isclose(acceptance_rate, 1.0):
        return float(speculative_tokens + 1)  # the limit of the geometric sum as a -> 1
    return (1.0 - acceptance_rate ** (speculative_tokens + 1)) / (1.0 - acceptance_rate)


def acceptance_rate_from_length(acceptance_length: float, speculative_tokens: int) -> float:
    """Invert expected_acceptance_length: the per-token rate a that explains a mean length.

    vLLM reports the mean acceptance length; the geometric a behind it is what the model needs
    (vLLM's accepted/drafted ratio is a different quantity, the mean of per-position rates).
    """
    if speculative_tokens < 1:
        raise ValueError(f"speculative_tokens must be >= 1, got {speculative_tokens}")
    length = min(max(acceptance_length, 1.0), speculative_tokens + 1.0)
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection: E is increasing in a
        mid = (low + high) / 2
        if expected_acceptance_length(mid, speculative_tokens) < length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True)
class CostPoint:
    """Measured costs at one batch size, relative to one target decode step."""

    batch_size: int
    draft_cost: float  # c(b) = D0 / T(b)
    verify_cost: float  # beta(b) = T(b(g_ref+1)) / T(b) at the profile's reference g

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.draft_cost < 0:
            raise ValueError(f"draft_cost must be >= 0, got {self.draft_cost}")
        if self.verify_cost < 1.0:
            raise ValueError(f"verify_cost must be >= 1.0 (verifying costs at least a step), got {self.verify_cost}")


@dataclass(frozen=True)
class CostProfile:
    """Draft and verify cost over batch size, piecewise linear in log(batch size), clamped at the ends."""

    points: tuple[CostPoint, ...]
    reference_speculative_tokens: int = REFERENCE_SPECULATIVE_TOKENS

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("points must not be empty")
        sizes = [p.batch_size for p in self.points]
        if sizes != sorted(set(sizes)):
            raise ValueError(f"points must have strictly increasing batch_size, got {sizes}")
        if self.reference_speculative_tokens < 1:
            raise ValueError("reference_speculative_tokens must be >= 1")

    @classmethod
    def from_spec_points(cls, points: Iterable[tuple[int, int, int]]) -> CostProfile:
        """Build from the spec's integers: (batchSize, draftCostPermille, verifyCostPercent)."""
        return cls(tuple(CostPoint(b, permille / 1000.0, percent / 100.0) for b, permille, percent in points))

    def draft_cost(self, batch_size: float) -> float:
        return self._interpolate(batch_size, "draft_cost")

    def verify_cost(self, batch_size: float, speculative_tokens: int) -> float:
        if speculative_tokens == 0:
            return 1.0
        at_reference = self._interpolate(batch_size, "verify_cost")
        scaled = 1.0 + (at_reference - 1.0) * speculative_tokens / self.reference_speculative_tokens
        return min(scaled, speculative_tokens + 1.0)

    def _interpolate(self, batch_size: float, field: str) -> float:
        if not batch_size >= 1.0:  # also catches NaN
            batch_size = 1.0  # an idle engine decodes like batch 1
        pts = self.points
        if batch_size <= pts[0].batch_size:
            return float(getattr(pts[0], field))
        for left, right in itertools.pairwise(pts):
            if batch_size <= right.batch_size:
                t = math.log(batch_size / left.batch_size) / math.log(right.batch_size / left.batch_size)
                return float((1 - t) * getattr(left, field) + t * getattr(right, field))
        return float(getattr(pts[-1], field))


def profile_from_latency_model(
    draft_cost_at_batch_1: float,
    saturation_tokens: float,
    batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
) -> CostProfile:
    """A profile from T(n) = T0 (1 + n / saturation_tokens) and a constant draft latency D0.

    beta(b) = T(b(g+1)) / T(b) and c(b) = D0 / T(b), so c falls with b (draft time is launch
    overhead, TIDE §IV-A) and beta rises from ~1 towards g+1 as decoding becomes compute-bound.
    """
    g = REFERENCE_SPECULATIVE_TOKENS
    t1 = 1.0 + 1.0 / saturation_tokens
    points = []
    for b in batch_sizes:
        tb = 1.0 + b / saturation_tokens
        points.append(CostPoint(b, draft_cost_at_batch_1 * t1 / tb, (1.0 + b * (g + 1) / saturation_tokens) / tb))
    return CostProfile(tuple(points))


# ESTIMATES, not measurements. Fitted to TIDE's published gpt-oss-120b speedups (Fig. 9): a draft
# with acceptance length ~2.5 at g=3 gives ~1.55x at batch 1 and ~1.28x at batch 64. That needs
# c(1) ~ 0.2 and T(n) saturating near 320 tokens (beta(64) ~ 1.5, beta(256) ~ 2.3). Measure your
# own server's profile and put it in the spec; these only make the defaults behave sensibly.
DEFAULT_DRAFT_COST_AT_BATCH_1 = 0.2
DEFAULT_SATURATION_TOKENS = 320.0
DEFAULT_PROFILE = profile_from_latency_model(DEFAULT_DRAFT_COST_AT_BATCH_1, DEFAULT_SATURATION_TOKENS)


def practical_speedup(
    acceptance_rate: float, speculative_tokens: int, batch_size: float, profile: CostProfile = DEFAULT_PROFILE
) -> float:
    """Modelled throughput with speculation over throughput without it (TIDE Eq. 5)."""
    if speculative_tokens == 0:
        return 1.0
    tokens_per_step = expected_acceptance_length(acceptance_rate, speculative_tokens)
    step_cost = profile.draft_cost(batch_size) * speculative_tokens + profile.verify_cost(
        batch_size, speculative_tokens
    )
    return tokens_per_step / step_cost


def best_speculative_tokens(
    acceptance_rate: float,
    batch_size: float,
    max_speculative_tokens: int,
    profile: CostProfile = DEFAULT_PROFILE,
    min_speedup: float = 1.0,
) -> tuple[int, float]:
    """The g in 0..max maximising modelled speedup; 0 (off) unless the best beats min_speedup."""
    best_g, best = 0, 1.0
    for g in range(1, max_speculative_tokens + 1):
        speedup = practical_speedup(acceptance_rate, g, batch_size, profile)
        if speedup > best:
            best_g, best = g, speedup
    if best <= min_speedup:
        return 0, 1.0
    return best_g, best


def tokens_per_batch_size_table(
    acceptance_rate: float,
    max_speculative_tokens: int,
    max_batch_size: int,
    profile: CostProfile = DEFAULT_PROFILE,
    min_speedup: float = 1.0,
) -> list[list[int]]:
    """vLLM's num_speculative_tokens_per_batch_size: [[start_bs, end_bs, K], ...], inclusive bands."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    table: list[list[int]] = []
    for b in range(1, max_batch_size + 1):
        g, _ = best_speculative_tokens(acceptance_rate, b, max_speculative_tokens, profile, min_speedup)
        if table and table[-1][2] == g:
            table[-1][1] = b
        else:
            table.append([b, b, g])
    return table


def tokens_for_batch_size(table: Sequence[Sequence[int]], batch_size: float) -> int:
    """Look up K for a batch size in a per-batch-size table (0 outside every band)."""
    b = max(1, round(batch_size))
    for start, end, k in table:
        if start <= b <= end:
            return k
    return 0


def _check_rate(acceptance_rate: float) -> None:
    if not 0.0 <= acceptance_rate <= 1.0:
        raise ValueError(f"acceptance_rate must be in [0, 1], got {acceptance_rate}")
