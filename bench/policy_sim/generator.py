"""Scenarios: a timeline of segments (domain mix, batch size) and the world's parameters, drawn from a seed.

Families cover what the issue names: steady, bursty load, long high load, short excursions, domain
shifts, slow drift, recurring domains (returns to an old one) and a bad launch draft. Every number
that varies is drawn from the seed; `train` seeds are for tuning, `held-out` seeds for reporting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

STEP_S = 5.0  # simulation resolution
TICK_S = 30.0  # spec.control.interval: one control pass (and one training decision) per tick
SEED_SETS = {"train": (11, 12, 13), "held-out": (1001, 1002), "diagnostic": tuple(range(21, 31))}
FAMILIES = ("steady", "bursty", "long_high_load", "short_excursions", "domain_shifts", "slow_drift",
            "recurring", "bad_launch")
# The draft pool's family (issue 16), run apart by `policy_bench.py --pool` with its own check: A, B, A,
# B, ... with every period at least three training rounds long (a round is at most 900 s here).
POOL_FAMILIES = ("recurring_pool",)


@dataclass(frozen=True)
class Segment:
    """One phase of the timeline: ``domain`` (blended in from ``previous`` over ``blend_s``), batch log-ramp."""

    name: str
    start_s: float
    end_s: float
    domain: int
    batch: tuple[float, float]
    previous: int | None = None
    blend_s: float = 0.0

    def batch_at(self, t: float) -> float:
        frac = (t - self.start_s) / (self.end_s - self.start_s)
        lo, hi = self.batch
        return math.exp(math.log(lo) + frac * (math.log(hi) - math.log(lo)))

    def weight_of_domain(self, t: float) -> float:
        if self.previous is None or self.blend_s <= 0:
            return 1.0
        return min(1.0, (t - self.start_s) / self.blend_s)


@dataclass(frozen=True)
class WorldParams:
    """How the world punishes (see world.py for why these values)."""

    training_s: float = 600.0  # one trainer Job, wall clock
    # One recall evaluation Job (issue 16), wall clock: scheduling, loading up to four drafts, scoring
    # a few thousand tokens each (the trainer's bound, 32k tokens) on one training GPU.
    recall_s: float = 180.0
    training_gain: float = 0.6  # a round closes this share of the gap to the ceiling, per buffer share
    forgetting: float = 0.2  # a round loses this share of what other domains gained over an untrained draft
    regression_probability: float = 0.25  # a candidate is worse live than in its evaluation
    regression: tuple[float, float] = (0.04, 0.12)  # by how much (per-token acceptance on its domains)
    eval_noise: float = 0.02  # relative sd of the trainer's held-out acceptance length
    capture_cost: float = 0.02  # serving throughput lost while capture is on
    training_cost: float = 0.01  # serving throughput lost while a trainer Job runs
    cost_error: float = 0.05  # true draft and verify costs above the operator's profile
    capture_samples_per_s: float = 4.0  # requests captured per second across the deployment


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    seed: int
    segments: tuple[Segment, ...]
    ceilings: tuple[float, ...]  # the acceptance a draft trained on a domain reaches, per domain
    launch: tuple[float, ...]  # the launch draft's true acceptance per domain
    world: WorldParams
    # Per domain, the acceptance a draft that forgot the domain falls to (world.trained): an untrained
    # draft's. The launch draft's level on the domains it never learnt; below it on its home domain.
    # Empty (older callers): the launch level everywhere.
    untrained: tuple[float, ...] = ()

    def forgotten_level(self, domain: int) -> float:
        return self.untrained[domain] if self.untrained else self.launch[domain]

    @property
    def duration_s(self) -> float:
        return self.segments[-1].end_s

    def segment_at(self, t: float) -> Segment:
        for segment in self.segments:
            if t < segment.end_s:
                return segment
        return self.segments[-1]

    def weights_at(self, t: float) -> tuple[float, ...]:
        segment = self.segment_at(t)
        w = [0.0] * len(self.ceilings)
        share = segment.weight_of_domain(t)
        w[segment.domain] += share
        if segment.previous is not None:
            w[segment.previous] += 1.0 - share
        return tuple(w)


def _domains(rng: np.random.Generator, n: int, bad_launch: bool) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Ceilings and the launch draft: good on domain 0 (unless bad), shift size drawn per other domain."""
    ceilings = tuple(float(c) for c in rng.uniform(0.58, 0.78, n))
    launch = [ceilings[0] - float(rng.uniform(0.0, 0.05))]
    launch += [float(rng.uniform(0.18, 0.5)) for _ in range(n - 1)]
    if bad_launch:
        launch = [float(rng.uniform(0.12, 0.32)) for _ in range(n)]
    return ceilings, tuple(min(a, c) for a, c in zip(launch, ceilings, strict=True))


class _Timeline:
    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.t = 0.0

    def add(self, name: str, minutes: float, domain: int, batch: tuple[float, float],
            previous: int | None = None, blend_min: float = 0.0) -> None:
        end = self.t + round(minutes * 60 / TICK_S) * TICK_S
        self.segments.append(Segment(f"{len(self.segments)}:{name}", self.t, end, domain, batch, previous,
                                     blend_min * 60))
        self.t = end


def _low(rng: np.random.Generator) -> tuple[float, float]:
    b = float(rng.uniform(4, 40))
    return (b, b)


def _high(rng: np.random.Generator) -> tuple[float, float]:
    b = float(rng.uniform(160, 480))
    return (b, b)


def _timeline(family: str, rng: np.random.Generator) -> tuple[_Timeline, int]:
    """The segments of one family and how many domains it uses."""
    tl = _Timeline()
    m = lambda lo, hi: float(rng.uniform(lo, hi))  # noqa: E731  (minutes)
    if family == "steady":
        tl.add("steady", m(60, 90), 0, _low(rng))
        return tl, 1
    if family == "bursty":
        for i in range(int(rng.integers(4, 7))):
            tl.add("high" if i % 2 else "low", m(5, 20), 0, _high(rng) if i % 2 else _low(rng))
        return tl, 1
    if family == "long_high_load":
        low = _low(rng)
        tl.add("low", m(15, 25), 0, low)
        tl.add("ramp-up", m(10, 20), 0, (low[1], _high(rng)[0]))
        tl.add("high", m(40, 70), 0, _high(rng))
        tl.add("low-again", m(15, 25), 0, low)
        return tl, 1
    if family == "short_excursions":
        base = _low(rng)
        for _ in range(int(rng.integers(2, 4))):
            tl.add("home", m(15, 25), 0, base)
            if rng.random() < 0.5:
                tl.add("away", m(3, 8), 1, base)
            else:
                tl.add("burst", m(3, 8), 0, _high(rng))
        tl.add("home", m(15, 25), 0, base)
        return tl, 2
    if family == "domain_shifts":
        n = int(rng.integers(3, 5))
        for d in range(n):
            tl.add(f"domain{d}", m(30, 50) if d else m(15, 30), d, _low(rng))
        return tl, n
    if family == "slow_drift":
        tl.add("domain0", m(20, 30), 0, _low(rng))
        tl.add("drift", m(30, 60), 1, _low(rng), previous=0, blend_min=m(30, 60))
        tl.add("domain1", m(30, 40), 1, _low(rng))
        return tl, 2
    if family == "recurring":
        b = _low(rng)
        for i in range(int(rng.integers(4, 6))):
            tl.add(f"domain{i % 2}", m(25, 45), i % 2, b)
        return tl, 2
    if family == "recurring_pool":
        b = _low(rng)
        for i in range(int(rng.integers(6, 9))):
            tl.add(f"domain{i % 2}", m(45, 60), i % 2, b)
        return tl, 2
    if family == "bad_launch":
        n = int(rng.integers(1, 3))
        for d in range(n):
            tl.add(f"domain{d}", m(40, 60), d, _low(rng))
        return tl, n
    raise ValueError(f"unknown family {family!r}")


def generate(family: str, seed: int, world: WorldParams | None = None) -> Scenario:
    rng = np.random.default_rng([(*FAMILIES, *POOL_FAMILIES).index(family), seed])
    tl, n = _timeline(family, rng)
    ceilings, launch = _domains(rng, n, bad_launch=family == "bad_launch")
    params = world or WorldParams(training_s=round(float(rng.uniform(480, 900)) / STEP_S) * STEP_S,
                                  regression_probability=float(rng.uniform(0.1, 0.35)),
                                  forgetting=float(rng.uniform(0.1, 0.35)))
    untrained = _untrained(rng, launch, bad_launch=family == "bad_launch")  # drawn last: the rest is unchanged
    return Scenario(f"{family}-{seed}", family, seed, tuple(tl.segments), ceilings, launch, params, untrained)


def _untrained(rng: np.random.Generator, launch: tuple[float, ...], bad_launch: bool) -> tuple[float, ...]:
    """How far a draft adapted away forgets each domain. The launch draft learnt its home domain
    (domain 0): adapting elsewhere can lose that too, 0.13-0.31 per token below the launch draft
    (bench/trainer_shift.py: a code draft adapted to prose lost 0.115 acceptance length on code in one
    round; the world's forgetting share of 0.1-0.35 per round reaches that on these gaps). A bad launch
    draft learnt nothing, and no draft learnt the other domains before serving them."""
    drop = float(rng.uniform(0.13, 0.31))
    home = 0.0 if bad_launch else drop
    return tuple(max(0.05, a - (home if d == 0 else 0.0)) for d, a in enumerate(launch))


def scenario_set(seeds: str, families: tuple[str, ...] = FAMILIES) -> list[Scenario]:
    """One scenario per family per seed of the named set."""
    return [generate(family, seed) for seed in SEED_SETS[seeds] for family in families]


def random_scenario(seed: int, max_minutes: float = 40.0) -> Scenario:
    """A short scenario of a random family, cut to ``max_minutes`` (the hindsight property test)."""
    rng = np.random.default_rng([99, seed])
    family = FAMILIES[int(rng.integers(len(FAMILIES)))]
    full = generate(family, seed)
    cut = max_minutes * 60
    kept = tuple(s if s.end_s <= cut else Segment(s.name, s.start_s, cut, s.domain, s.batch, s.previous, s.blend_s)
                 for s in full.segments if s.start_s < cut)
    return Scenario(f"{full.name}-cut", family, seed, kept, full.ceilings, full.launch, full.world, full.untrained)
