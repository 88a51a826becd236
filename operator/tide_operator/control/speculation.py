"""Speculate or not: the fleet-wide switch, with hysteresis and dwell time.

What is judged depends on who handles the load. With adaptive tokens the engine applies the
policy's tokens-per-batch-size table at the true batch size every step, g=0 where speculation does
not pay, with no dwell: the switch judges the draft (its best modelled speedup over the table's
batch sizes) and leaves the load to the table. A switch that also followed the load added its dwell
on top of the table, so a short low-load burst after high load never speculated (issue 15,
mechanism 2). Without adaptive tokens (K everywhere) the switch is the only way to stop losing at
high load: it judges the speedup at the observed batch size.

On once speedup > 1 + margin; off only once it falls below 1 + margin - hysteresis. Either
condition must hold at every observation for min_dwell seconds before the switch (like the HPA's
stabilization window), so noise that crosses a threshold now and then never flips the state, and
two switches are always at least min_dwell apart (a probe, probe.py, is the exception: one rate
window). Missing observations (Prometheus down, no traffic) hold the current state: acting on
nothing is how controllers flap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from tide_operator.control.cost_model import (
    DEFAULT_PROFILE,
    CostProfile,
    best_speculative_tokens,
    practical_speedup,
)


class SpeculationMode(StrEnum):
    ADAPTIVE = "Adaptive"
    ON = "On"
    OFF = "Off"


class SpeculationAction(StrEnum):
    ENABLE = "Enable"
    DISABLE = "Disable"
    HOLD = "Hold"


# Reason constants (status.lastDecision.reason, Event reasons).
REASON_MODE_ON = "SpeculationForcedOn"
REASON_MODE_OFF = "SpeculationForcedOff"
REASON_PAUSED = "Paused"
REASON_NO_DRAFT = "NoCompatibleDraft"
REASON_NO_OBSERVATION = "ObservationMissing"
REASON_MEASURING = "MeasuringDraft"
REASON_SPEEDUP_ABOVE_MARGIN = "SpeedupAboveMargin"
REASON_SPEEDUP_BELOW_HYSTERESIS = "SpeedupBelowHysteresis"
REASON_WITHIN_HYSTERESIS = "SpeedupWithinHysteresis"
REASON_DWELL = "MinDwellNotElapsed"


@dataclass(frozen=True)
class DecisionParams:
    """spec.control.decision: speedupMarginPercent, hysteresisPercent, minDwell, probeInterval (seconds)."""

    speedup_margin_percent: float = 5.0
    hysteresis_percent: float = 3.0
    min_dwell_s: float = 120.0
    probe_interval_s: float = 600.0  # 0: never probe (probe.py)

    def __post_init__(self) -> None:
        if self.speedup_margin_percent < 0:
            raise ValueError("decision.speedupMarginPercent must be >= 0")
        if not 0 <= self.hysteresis_percent <= self.speedup_margin_percent + 100:
            raise ValueError("decision.hysteresisPercent must be >= 0 and leave the off threshold above 0")
        if self.min_dwell_s < 0:
            raise ValueError("decision.minDwell must be >= 0")
        if self.probe_interval_s < 0:
            raise ValueError("decision.probeInterval must be >= 0 (0: no probes)")

    @property
    def on_threshold(self) -> float:
        return 1.0 + self.speedup_margin_percent / 100.0

    @property
    def off_threshold(self) -> float:
        return 1.0 + (self.speedup_margin_percent - self.hysteresis_percent) / 100.0


@dataclass(frozen=True)
class SpeculationState:
    enabled: bool = False
    changed_at: float | None = None  # when it last switched (None: never)
    pending_since: float | None = None  # since when the model has asked for the other state


@dataclass(frozen=True)
class SpeculationInput:
    """What the decision reads; acceptance_rate is the per-token a of the served draft."""

    acceptance_rate: float | None
    batch_size: float | None
    max_speculative_tokens: int
    adaptive_tokens: bool = True
    has_draft: bool = True
    max_batch_size: int = 256  # the table's last batch size (the engine's max_num_seqs)


@dataclass(frozen=True)
class Decision:
    action: SpeculationAction
    reason: str
    message: str
    state: SpeculationState
    speculative_tokens: int = 0  # g at the observed batch size (0 when off or unknown)
    speedup: float | None = None  # what is judged: the draft at its best with adaptive tokens, else here


def decide_speculation(
    observed: SpeculationInput,
    state: SpeculationState,
    mode: SpeculationMode,
    params: DecisionParams,
    now: float,
    *,
    paused: bool = False,
    profile: CostProfile = DEFAULT_PROFILE,
) -> Decision:
    forced = _forced(observed, state, mode, now, paused=paused)
    if forced is not None:
        return forced
    a, b = observed.acceptance_rate, observed.batch_size
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return _unobserved(observed, state, now)
    a = min(max(a, 0.0), 1.0)
    if observed.adaptive_tokens:
        g, speedup, best_batch = _draft_at_its_best(observed, a, profile)
        g_here, _ = best_speculative_tokens(a, b, observed.max_speculative_tokens, profile, params.off_threshold)
        numbers = (f"speedup={speedup:.3f} at the draft's best batch_size={best_batch} g={g} "
                   f"acceptance_rate={a:.3f}; the table's g={g_here} at batch_size={b:.1f}")
        return _by_model(state, params, now=now, numbers=numbers, g=g_here, speedup=speedup)
    g = observed.max_speculative_tokens
    speedup = practical_speedup(a, g, b, profile)
    numbers = f"speedup={speedup:.3f} at batch_size={b:.1f} acceptance_rate={a:.3f} g={g}"
    return _by_model(state, params, now=now, numbers=numbers, g=g, speedup=speedup)


def _forced(
    observed: SpeculationInput, state: SpeculationState, mode: SpeculationMode, now: float, *, paused: bool
) -> Decision | None:
    """Decisions that do not need the model: paused, forced modes, no draft."""
    if paused:
        return _hold(state, REASON_PAUSED, "control.paused is set; speculation left as it is")
    if mode is SpeculationMode.ON:
        g = observed.max_speculative_tokens
        return _switch(state, REASON_MODE_ON, "spec.speculation is On", now=now, enabled=True, g=g)
    if mode is SpeculationMode.OFF:
        return _switch(state, REASON_MODE_OFF, "spec.speculation is Off", now=now, enabled=False, g=0)
    if not observed.has_draft:
        message = "no draft for the target revision"
        return _switch(state, REASON_NO_DRAFT, message, now=now, enabled=False, g=0)
    return None


def _unobserved(observed: SpeculationInput, state: SpeculationState, now: float) -> Decision:
    a, b = observed.acceptance_rate, observed.batch_size
    if a is None and b is not None and not math.isnan(b) and not state.enabled:
        # Prometheus answers but nobody has measured this draft yet: speculate to measure it.
        message = f"acceptance of the draft unknown at batch_size={b:.1f}: speculating to measure it"
        g = observed.max_speculative_tokens
        return _switch(state, REASON_MEASURING, message, now=now, enabled=True, g=g)
    return _hold(state, REASON_NO_OBSERVATION, f"acceptance_rate={a} batch_size={b}: holding")


def _by_model(
    state: SpeculationState, params: DecisionParams, *, now: float, numbers: str, g: int, speedup: float
) -> Decision:
    if state.enabled:
        wanted, reason = speedup < params.off_threshold, REASON_SPEEDUP_BELOW_HYSTERESIS
        condition = f"< off threshold {params.off_threshold:.3f}"
    else:
        wanted, reason = speedup > params.on_threshold, REASON_SPEEDUP_ABOVE_MARGIN
        condition = f"> on threshold {params.on_threshold:.3f}"
    served_g = g if state.enabled else 0
    if not wanted:
        held = REASON_SPEEDUP_ABOVE_MARGIN if speedup > params.on_threshold else REASON_WITHIN_HYSTERESIS
        settled = replace(state, pending_since=None)
        return Decision(SpeculationAction.HOLD, held, numbers, settled, served_g, speedup)
    pending = now if state.pending_since is None else state.pending_since
    held_for = now - pending
    message = f"{numbers} {condition} for {held_for:.0f}s"
    if held_for < params.min_dwell_s:
        waiting = replace(state, pending_since=pending)
        message += f" of min dwell {params.min_dwell_s:.0f}s"
        return Decision(SpeculationAction.HOLD, REASON_DWELL, message, waiting, served_g, speedup)
    switch_g = 0 if state.enabled else g
    return _switch(state, reason, message, now=now, enabled=not state.enabled, g=switch_g, speedup=speedup)


def _draft_at_its_best(observed: SpeculationInput, a: float, profile: CostProfile) -> tuple[int, float, int]:
    """The best g, speedup and batch size over the table's range 1..max_batch_size.

    Between two profile points c and beta are affine in log(batch size), so at each g the speedup is
    monotone there (beta's cap at g + 1 only makes the step cost concave): the best is at a point of
    the profile or at an end of the range.
    """
    last = max(observed.max_batch_size, 1)
    sizes = {1, last} | {p.batch_size for p in profile.points if 1 < p.batch_size < last}
    k = observed.max_speculative_tokens
    return max(((g, practical_speedup(a, g, b, profile), b) for b in sorted(sizes) for g in range(1, k + 1)),
               key=lambda gsb: gsb[1])


def _hold(state: SpeculationState, reason: str, message: str, g: int = 0, speedup: float | None = None) -> Decision:
    return Decision(SpeculationAction.HOLD, reason, message, state, g if state.enabled else 0, speedup)


def _switch(
    state: SpeculationState,
    reason: str,
    message: str,
    *,
    now: float,
    enabled: bool,
    g: int,
    speedup: float | None = None,
) -> Decision:
    if state.enabled == enabled:
        return Decision(SpeculationAction.HOLD, reason, message, state, g, speedup)
    action = SpeculationAction.ENABLE if enabled else SpeculationAction.DISABLE
    switched = SpeculationState(enabled=enabled, changed_at=now, pending_since=None)
    return Decision(action, reason, message, switched, g, speedup)
