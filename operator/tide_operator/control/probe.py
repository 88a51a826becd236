"""Probe: re-measure a served draft that has gone unmeasured (issue 15, mechanism 1).

vLLM reports acceptance only for tokens it drafted. Once speculation is off (or the table gives
g=0 at the load), the served draft is never measured again: the estimate keeps the bad domain's
acceptance, the drift detector is frozen, and speculation would stay off after the traffic returns
to where the draft is good. So, in Adaptive mode, once the served draft has shown no acceptance for
long enough and there is traffic, speculation is switched on for one Prometheus rate window: the
window then holds only probe-time drafting, a measurement that feeds the estimate and the drift
detector like any other. The normal decision decides at the probe's end, without a second min dwell
(the window was the measurement); a probe whose first measurement shows the draft does not pay at
the observed load ends at once.

Back-off. The first probe of a silence comes after probeInterval / 8; each one that finds the draft
still not paying doubles the wait, up to probeInterval (never less than one window). Traffic that
comes back soon comes back most often (a short excursion, a burst), and a probe that finds the draft
still bad ends at its first measurement, so early probes are cheap; a silence that lasts settles at
probeInterval.

Cost. A probe speculates only where it is cheap and can change the decision: at a batch size the
table for the last estimate already speculates, its g; elsewhere g=1 (the cheapest g that measures)
where the draft at its best measured acceptance (the detector's short average: the best raw window
is biased high by noise) would speculate, else 0. At high load, where even the best this draft has
shown does not pay, a probe drafts nothing and so none is started. Probes settle at probeInterval
apart and last at most one window: the duty cycle settles at window / (probeInterval + window) at
most; the first three of a silence (1/8, 1/4, 1/2 of it apart) cost at most a window each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tide_operator.control.actions import Bands
from tide_operator.control.cost_model import CostProfile, best_speculative_tokens, practical_speedup

REASON_PROBING = "ProbingDraft"  # a probe is running (the switch may be off)
BACKOFF_STEPS = 3  # the first probe of a silence after probeInterval / 2**3
REASON_PROBE_ENDED = "ProbeEnded"  # it showed the draft still does not pay: off again until the next one


@dataclass(frozen=True)
class ProbeState:
    started_at: float | None = None  # a probe is running since
    quiet_since: float | None = None  # the served draft has shown no acceptance since (None: measured)
    best_acceptance: float | None = None  # the served draft's best per-token a so far
    unpaid: int = 0  # probes of this silence that found the draft still not paying (the back-off)

    @property
    def running(self) -> bool:
        return self.started_at is not None


@dataclass(frozen=True)
class DraftModel:
    """How the fleet speculates: the g range, the cost profile, the table's threshold."""

    speculative_tokens: int  # numSpeculativeTokens
    adaptive_tokens: bool  # a table per batch size (else K everywhere)
    profile: CostProfile
    min_speedup: float  # the table speculates where the best speedup is above this (the off threshold)

    def tokens_at(self, acceptance: float, batch_size: float) -> int:
        """g the normal decision would use at this batch size (0: speculation does not pay here)."""
        if self.adaptive_tokens:
            g, _ = best_speculative_tokens(acceptance, batch_size, self.speculative_tokens, self.profile,
                                           self.min_speedup)
            return g
        k = self.speculative_tokens
        return k if practical_speedup(acceptance, k, batch_size, self.profile) > self.min_speedup else 0

    def probe_tokens(self, estimate: float, best: float, batch_size: float) -> int:
        """g a probe drafts with at this batch size (see the module's docstring)."""
        g = self.tokens_at(estimate, batch_size)
        if g or not self.tokens_at(best, batch_size):
            return g
        return 1 if self.adaptive_tokens else self.speculative_tokens

    def probe_table(self, estimate: float, best: float, max_batch_size: int) -> Bands | None:
        """The probe's tokens-per-batch-size bands (None without adaptive tokens: the launch table)."""
        if not self.adaptive_tokens:
            return None
        bands: list[list[int]] = []
        for b in range(1, max_batch_size + 1):
            g = self.probe_tokens(estimate, best, b)
            if bands and bands[-1][2] == g:
                bands[-1][1] = b
            else:
                bands.append([b, b, g])
        return tuple((first, last, g) for first, last, g in bands)


def track(state: ProbeState, measured: bool, estimate: float | None, now: float) -> ProbeState:
    """Fold one pass in: since when the draft is unmeasured, and its best acceptance."""
    if not measured:
        return state if state.quiet_since is not None else replace(state, quiet_since=now)
    best = estimate if state.best_acceptance is None or estimate is None else max(state.best_acceptance, estimate)
    unpaid = state.unpaid if state.running else 0  # measured by the fleet again: the silence is over
    return replace(state, quiet_since=None, best_acceptance=best, unpaid=unpaid)


def wait_s(state: ProbeState, interval_s: float, window_s: float) -> float:
    """Silence before the next probe: probeInterval / 8, doubled by each unpaid probe, up to probeInterval."""
    return max(window_s, interval_s / 2.0 ** max(0, BACKOFF_STEPS - state.unpaid))


@dataclass(frozen=True)
class ProbePlan:
    """A probe to start now: the numbers it is chosen from (for the table and the message)."""

    estimate: float  # the last per-token a of the served draft
    best: float  # its best so far
    batch_size: float
    quiet_s: float  # how long it has gone unmeasured
    tokens: int  # g the probe drafts with at this batch size


def plan_start(state: ProbeState, model: DraftModel, estimate: float | None, batch_size: float | None,
               interval_s: float, window_s: float, now: float) -> ProbePlan | None:
    """A probe when the draft went unmeasured for wait_s, there is traffic, and it would draft here.

    Never before one rate window of silence: the window must hold nothing but the probe's drafting.
    """
    if state.running or interval_s <= 0 or state.quiet_since is None:
        return None
    if now - state.quiet_since < wait_s(state, interval_s, window_s):
        return None
    if estimate is None or state.best_acceptance is None or batch_size is None or not batch_size > 0:
        return None
    g = model.probe_tokens(estimate, state.best_acceptance, batch_size)
    return ProbePlan(estimate, state.best_acceptance, batch_size, now - state.quiet_since, g) if g else None


def end_due(state: ProbeState, model: DraftModel, measured: bool, estimate: float | None,
            batch_size: float | None, window_s: float, now: float) -> bool:
    """One window is over, or the first measurement already shows the draft does not pay here."""
    if state.started_at is None:
        return False
    if now - state.started_at >= window_s:
        return True
    return measured and estimate is not None and batch_size is not None and not model.tokens_at(estimate, batch_size)


def started(state: ProbeState, now: float) -> ProbeState:
    return replace(state, started_at=now)


def ended(state: ProbeState, now: float) -> ProbeState:
    """The probe found the draft still not paying: the next one waits twice as long from here."""
    return replace(state, started_at=None, quiet_since=now, unpaid=state.unpaid + 1)
