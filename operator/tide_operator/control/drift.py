"""Workload-shift detection (TIDE Algorithm 1): short and long EMAs of served acceptance.

Both EMAs start at the mean of the first min_samples samples. After that each observation
moves them with a time-weighted factor lambda = 0.5 ** (dt / half_life), so the detector does
not depend on how often Prometheus is polled. A shift is short < long * (1 - threshold).

After a promotion both EMAs start at the canary's live acceptance (policy._restart_drift), a number
from one or two pods over a few minutes: as the long EMA's seed it weighs as one short half-life of
the fleet's numbers, not as a long half-life of them. Held as a plain EMA's memory, one canary that read
3% high left the long EMA above the fleet's true level for half an hour, and ordinary noise on the
short EMA then crossed the threshold: a false shift that cancelled the next training run.

A rise is the mirror signal (rise_detected): short > long * (1 + threshold). Traffic that changes
towards a domain the served draft knows better (a return home) raises acceptance, and no fall is seen;
the draft pool may still hold a better draft for it (control/lifecycle_recall.py).

The signal has hysteresis: once up it stays up until short recovers to long * (1 - threshold / 2).
After a real shift the long EMA slides down to the new level, so the ratio passes the threshold
slowly; without the band, noise on the short EMA crossed it again and again, and every rising
edge restarted training on the same shift (seen in the e2e: five runs cancelled in a row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DriftParams:
    """spec.control.drift: shortHalfLife, longHalfLife (seconds), thresholdPercent, minSamples."""

    short_half_life_s: float = 120.0
    long_half_life_s: float = 1800.0
    threshold_percent: float = 5.0
    min_samples: int = 200

    def __post_init__(self) -> None:
        if not 0 < self.short_half_life_s < self.long_half_life_s:
            raise ValueError("drift.shortHalfLife must be > 0 and shorter than drift.longHalfLife")
        if not 0 < self.threshold_percent < 100:
            raise ValueError("drift.thresholdPercent must be in (0, 100)")
        if self.min_samples < 1:
            raise ValueError("drift.minSamples must be >= 1")


@dataclass(frozen=True)
class DriftState:
    """None EMAs mean "still warming up"; warmup_* accumulate the first samples."""

    short_ema: float | None = None
    long_ema: float | None = None
    updated_at: float | None = None
    warmup_samples: int = 0
    warmup_sum: float = 0.0  # sum of acceptance * samples during warm-up
    hold_until: float | None = None  # the policy feeds no observations before this (a new draft settling)
    # Seconds of evidence in the long EMA when it was seeded from one number (a promoted canary's):
    # each observation then weighs by its duration against it. None: a plain EMA (older status too).
    long_evidence_s: float | None = None

    @property
    def ready(self) -> bool:
        return self.short_ema is not None and self.long_ema is not None


def update_drift(
    state: DriftState, acceptance: float | None, samples: int, now: float, params: DriftParams
) -> DriftState:
    """Fold one observation in; observations without samples or value leave the state unchanged."""
    if acceptance is None or math.isnan(acceptance) or samples <= 0:
        return state
    if not state.ready:
        total = state.warmup_samples + samples
        acc_sum = state.warmup_sum + acceptance * samples
        if total < params.min_samples:
            return replace(state, warmup_samples=total, warmup_sum=acc_sum, updated_at=now)
        mean = acc_sum / total
        return DriftState(short_ema=mean, long_ema=mean, updated_at=now, warmup_samples=total, warmup_sum=acc_sum)
    assert state.short_ema is not None
    assert state.long_ema is not None
    # A gap in data (speculation off, no traffic) counts as at most one short half-life, so the
    # long EMA keeps its memory of the old regime across the gap.
    dt = min(max(0.0, now - (state.updated_at or now)), params.short_half_life_s)
    short = _ema(state.short_ema, acceptance, dt, params.short_half_life_s)
    if state.long_evidence_s is None:
        long = _ema(state.long_ema, acceptance, dt, params.long_half_life_s)
        return replace(state, short_ema=short, long_ema=long, updated_at=now)
    # The seed's weight decays like any observation's; as the evidence grows toward dt / (1 - keep)
    # (about 1.44 long half-lives) this becomes the plain EMA.
    keep = 0.5 ** (dt / params.long_half_life_s)
    evidence = state.long_evidence_s * keep + dt
    long = (state.long_ema * state.long_evidence_s * keep + acceptance * dt) / evidence if evidence > 0 else acceptance
    return replace(state, short_ema=short, long_ema=long, updated_at=now, long_evidence_s=evidence)


def shift_detected(state: DriftState, params: DriftParams, active: bool = False) -> bool:
    """The shift signal; ``active`` is its value at the last pass (it holds until short recovers)."""
    if state.short_ema is None or state.long_ema is None:
        return False
    threshold = params.threshold_percent / 100.0
    return state.short_ema < state.long_ema * (1.0 - (threshold / 2 if active else threshold))


def rise_detected(state: DriftState, params: DriftParams, active: bool = False) -> bool:
    """The rise signal, the shift's mirror: short above long by the threshold (held to half of it)."""
    if state.short_ema is None or state.long_ema is None:
        return False
    threshold = params.threshold_percent / 100.0
    return state.short_ema > state.long_ema * (1.0 + (threshold / 2 if active else threshold))


def _ema(previous: float, value: float, dt: float, half_life: float) -> float:
    keep: float = 0.5 ** (dt / half_life)
    return keep * previous + (1.0 - keep) * value
