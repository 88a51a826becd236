"""A measured cost profile from a concurrency sweep with speculation off and on (pure).

At each concurrency b the sweep runs b requests at once, each decoding a fixed number of tokens,
once with speculation off and once on at the reference g, and records the wall time and vLLM's
spec-decode counters. From that:

- target step time T(b) = elapsed / (tokens / b): every step decodes one token per request;
- speculative step time S(b) = elapsed / (drafts / b): vLLM counts one draft per request per step;
- combined step cost s(b) = S(b) / T(b) = c(b) g + beta(b), the denominator of TIDE's Eq. 5.

The cost model only needs s(b) at the reference g (its cost is affine in g), but it stores c and
beta apart: beta(b) = T(b (g+1)) / T(b) from an affine fit T(n) = T0 + k n to the off sweep (the
model's own assumption; the sweep rarely reaches b (g+1) sequences), and c(b) = (s(b) - beta(b)) / g
the remainder, so c g + beta reproduces the measured s(b) exactly wherever c >= 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tide_operator.control.cost_model import (
    CostPoint,
    CostProfile,
    acceptance_rate_from_length,
    practical_speedup,
)

# The bounds of the spec's CostPoint (api/spec_control.py), in the spec's integer units.
MAX_DRAFT_COST_PERMILLE = 100_000
MIN_VERIFY_COST_PERCENT = 100
MAX_VERIFY_COST_PERCENT = 10_000


@dataclass(frozen=True)
class SweepPoint:
    """One measurement: ``concurrency`` requests decoding at once, speculation on or off."""

    concurrency: int
    speculation: bool
    output_tokens: int  # completion tokens over all requests
    elapsed_s: float
    drafts: float = 0.0  # vllm:spec_decode_num_drafts_total over the run
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.output_tokens < 1 or not self.elapsed_s > 0:
            raise ValueError(f"a sweep point needs concurrency, tokens and time > 0: {self}")
        if self.speculation and self.drafts <= 0:
            raise ValueError(f"speculation was on at concurrency {self.concurrency} but nothing was drafted")

    @property
    def throughput(self) -> float:
        return self.output_tokens / self.elapsed_s

    @property
    def step_s(self) -> float:
        steps = (self.drafts if self.speculation else self.output_tokens) / self.concurrency
        return self.elapsed_s / steps

    @property
    def acceptance_length(self) -> float:
        """Tokens per verify step and request, the bonus token included (1 + accepted / drafts)."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else 1.0


@dataclass(frozen=True)
class Sweep:
    points: tuple[SweepPoint, ...]
    speculative_tokens: int  # the g speculation ran with (the profile's reference g)

    def at(self, concurrency: int, speculation: bool) -> SweepPoint:
        for p in self.points:
            if p.concurrency == concurrency and p.speculation == speculation:
                return p
        raise KeyError(f"no measurement at concurrency {concurrency} with speculation {speculation}")

    def concurrencies(self) -> list[int]:
        """The concurrencies measured both with speculation off and on."""
        off = {p.concurrency for p in self.points if not p.speculation}
        return sorted(off & {p.concurrency for p in self.points if p.speculation})

    def measured_speedup(self, concurrency: int) -> float:
        return self.at(concurrency, True).throughput / self.at(concurrency, False).throughput

    def acceptance_rate(self, concurrency: int) -> float:
        """The geometric per-token rate behind the measured mean acceptance length (model input)."""
        return acceptance_rate_from_length(self.at(concurrency, True).acceptance_length, self.speculative_tokens)


def affine_step_time(sweep: Sweep) -> tuple[float, float]:
    """Least-squares (T0, k) of T(n) = T0 + k n over the off sweep; k >= 0 (a step never gets cheaper)."""
    xs = [float(p.concurrency) for p in sweep.points if not p.speculation]
    ys = [p.step_s for p in sweep.points if not p.speculation]
    if not xs:
        raise ValueError("the sweep has no measurement with speculation off")
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
    slope = max(slope, 0.0)
    return mean_y - slope * mean_x, slope


def cost_points(sweep: Sweep) -> tuple[CostPoint, ...]:
    """c(b) and beta(b) at every concurrency measured both ways (see the module docstring)."""
    g = sweep.speculative_tokens
    t0, k = affine_step_time(sweep)
    points = []
    for b in sweep.concurrencies():
        combined = sweep.at(b, True).step_s / sweep.at(b, False).step_s
        fitted = t0 + k * b
        beta = (t0 + k * b * (g + 1)) / fitted if fitted > 0 else 1.0
        # c >= 0: where s is below the fitted beta, beta takes all of s (at least one target step).
        beta = max(1.0, min(beta, combined, g + 1.0))
        points.append(CostPoint(b, max(combined - beta, 0.0) / g, beta))
    return tuple(points)


def spec_points(points: Sequence[CostPoint]) -> list[dict[str, int]]:
    """The ConfigMap document's points: the spec's integer units, clamped to its bounds."""
    return [
        {
            "batchSize": p.batch_size,
            "draftCostPermille": min(round(p.draft_cost * 1000), MAX_DRAFT_COST_PERMILLE),
            "verifyCostPercent": min(max(round(p.verify_cost * 100), MIN_VERIFY_COST_PERCENT), MAX_VERIFY_COST_PERCENT),
        }
        for p in points
    ]


def profile_from_spec_points(points: Sequence[dict[str, int]]) -> CostProfile:
    """The CostProfile the operator builds from these points (what it will actually use)."""
    triples = ((p["batchSize"], p["draftCostPermille"], p["verifyCostPercent"]) for p in points)
    return CostProfile.from_spec_points(triples)


def predicted_speedup(sweep: Sweep, concurrency: int, profile: CostProfile) -> float:
    """The model's speedup at this concurrency, from the acceptance measured in the same run."""
    return practical_speedup(sweep.acceptance_rate(concurrency), sweep.speculative_tokens, concurrency, profile)


def sweep_from_json(document: dict[str, Any]) -> Sweep:
    """The measurement JSON written by the sweep (and `tide calibrate --measure-only`)."""
    points = tuple(
        SweepPoint(
            concurrency=int(p["concurrency"]),
            speculation=bool(p["speculation"]),
            output_tokens=int(p["outputTokens"]),
            elapsed_s=float(p["elapsedSeconds"]),
            drafts=float(p.get("drafts", 0.0)),
            draft_tokens=float(p.get("draftTokens", 0.0)),
            accepted_tokens=float(p.get("acceptedTokens", 0.0)),
        )
        for p in document["points"]
    )
    return Sweep(points, int(document["numSpeculativeTokens"]))


def sweep_to_json(sweep: Sweep) -> dict[str, Any]:
    return {
        "numSpeculativeTokens": sweep.speculative_tokens,
        "points": [
            {"concurrency": p.concurrency, "speculation": p.speculation, "outputTokens": p.output_tokens,
             "elapsedSeconds": p.elapsed_s, "drafts": p.drafts, "draftTokens": p.draft_tokens,
             "acceptedTokens": p.accepted_tokens}
            for p in sweep.points
        ],
    }
