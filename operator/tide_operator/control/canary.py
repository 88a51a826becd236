"""Canary analysis in Argo Rollouts' vocabulary: measurements, successCondition, failureLimit.

Each measurement compares canary pods with control pods: acceptance length is primary (it does
not depend on hardware noise), generation throughput per pod is secondary. Both are judged against
the noise the analysis has measured, not against a fixed band alone:
- every measurement with data adds the relative differences d_i = canary/control - 1 (acceptance
  length) and loss_i = 1 - canary/control (throughput per pod) to the analysis;
- after n >= 2 of them the verdict reads their mean and its standard error se = s / sqrt(n) (s the
  sample standard deviation), with band = max(minAcceptanceLengthGainPercent, t * se) and
  t = Student's t, 97.5% quantile, n - 1 degrees of freedom (12.7 at n = 2, 2.78 at n = 5);
- successCondition: mean d > band and the throughput guard holds; failureCondition: mean d < -band,
  or mean loss > max(maxThroughputLossPercent, t * se of the losses); otherwise (one measurement
  only: its noise is unknown, or missing data) Inconclusive.
The mean is cumulative, so each measurement judges all the evidence so far (a sequential test).
Under 3% noise per group and five measurements, two equal drafts fail 9% of their canaries (about
2.5% per look and metric) instead of 90% under the fixed 2% band, and a 10% better draft is
promoted in 95% instead of 69% (tests/unit/control/test_policy_mechanisms_canary.py). Caveat: measurements one
interval apart over a longer Prometheus rate window share most of their counters; their spread
understates the noise of independent windows, which the band's floor (the minimum gain) bounds.
More failed measurements than failureLimit fails the analysis at once. consecutiveSuccessLimit
successful measurements in a row succeed it at once (Argo Rollouts 1.8's field of that name): a
clearly better draft need not wait out the window. The window is a count of measurements
(analysisWindow / interval, Argo's `count`), not a deadline: passes the operator could not run (an
apiserver outage, a restart) take none, so an outage extends the analysis instead of ending it on
too little evidence. Once they are taken the analysis succeeds only if its last measurement, which
judges every measurement before it, was Successful; otherwise it is Inconclusive, which like a
failure keeps the old draft.

What the canary ran is carried in the analysis (mechanism 3 of issue 15): each measurement's
per-token acceptance of the canary pods (position 0's acceptance, which is a whatever g ran; else
the mean length inverted by the caller at the g the canary pods ran then), so the promoted draft's
estimate never depends on the fleet's g at the promotion pass.

A first draft (the pods ran only the bootstrap head at K=0) has no served draft to beat:
measure_first_draft judges its live acceptance by the cost model's speedup at the observed load,
with the same throughput guard against the pods that do not speculate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from tide_operator.control.cost_model import (
    DEFAULT_PROFILE,
    CostProfile,
    acceptance_rate_from_length,
    best_speculative_tokens,
)


@dataclass(frozen=True)
class CanaryParams:
    """spec.control.canary (durations in seconds)."""

    replicas: int = 1
    analysis_window_s: float = 300.0
    min_acceptance_length_gain_percent: float = 2.0
    max_throughput_loss_percent: float = 5.0
    failure_limit: int = 0
    min_promotion_interval_s: float = 600.0
    measurement_interval_s: float = 60.0  # Argo's `interval`: one measurement per minute of the window
    consecutive_success_limit: int = 3  # 0: always wait for the end of the window

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("canary.replicas must be >= 1")
        if self.analysis_window_s <= 0:
            raise ValueError("canary.analysisWindow must be > 0")
        if self.failure_limit < 0:
            raise ValueError("canary.failureLimit must be >= 0")
        if self.min_promotion_interval_s < 0:
            raise ValueError("canary.minPromotionInterval must be >= 0")
        if self.consecutive_success_limit < 0:
            raise ValueError("canary.consecutiveSuccessLimit must be >= 0")
        if self.measurement_interval_s <= 0:
            raise ValueError("canary.measurementInterval must be > 0")

    @property
    def measurements(self) -> int:
        """The window's measurements (Argo's count): the analysis ends after this many are taken.

        Counted, not timed: passes the operator could not run (an apiserver outage, a restart) take
        no measurement, so an outage extends the canary instead of ending it on too little evidence.
        """
        return max(1, round(self.analysis_window_s / self.measurement_interval_s))


@dataclass(frozen=True)
class PodGroupMetrics:
    """Live metrics of one group of pods (canary or control) over the last rate window."""

    acceptance_length: float | None  # 1.0 = no speculation
    generation_throughput: float | None  # tokens/s per pod
    per_token_acceptance: float | None = None  # position 0's acceptance: a itself, whatever g ran


@dataclass(frozen=True)
class FirstDraftParams:
    """How a first draft is judged: no served draft's acceptance to beat (pods ran the bootstrap head at K=0).

    ``min_speedup`` is speculation's on-threshold (1 + spec.control.decision.speedupMarginPercent/100):
    a first draft is promoted only if speculation would switch on with it.
    """

    speculative_tokens: int = 3  # K the canary pods draft with
    min_speedup: float = 1.05
    profile: CostProfile = field(default_factory=lambda: DEFAULT_PROFILE)

    def __post_init__(self) -> None:
        if self.speculative_tokens < 1:
            raise ValueError("numSpeculativeTokens must be >= 1")
        if self.min_speedup < 1.0:
            raise ValueError("the first draft's speedup threshold must be >= 1")


class MeasurementResult(StrEnum):
    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"


class AnalysisPhase(StrEnum):
    RUNNING = "Running"
    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"


@dataclass(frozen=True)
class CanaryAnalysis:
    """Measurements so far (plain data: it survives an operator restart in status).

    Fields added later default to empty, so status written before them still loads.
    """

    started_at: float
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    canary_length_sum: float = 0.0  # over measurements with data
    with_length: int = 0
    measured_at: float | None = None
    consecutive_successes: int = 0  # the current run of successful measurements
    length_gains: tuple[float, ...] = ()  # canary / control acceptance length - 1, per measurement
    throughput_losses: tuple[float, ...] = ()  # 1 - canary / control throughput per pod, per measurement
    canary_acceptance_sum: float = 0.0  # per-token a of the canary pods, to seed the promoted estimate
    with_acceptance: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CanaryAnalysis:
        fields = dict(data)
        for name in ("length_gains", "throughput_losses"):
            fields[name] = tuple(fields.get(name, ()))  # JSON gives a list
        return cls(**fields)

    def due(self, params: CanaryParams, now: float) -> bool:
        """A measurement is due one interval after the start or the previous measurement."""
        last = self.started_at if self.measured_at is None else self.measured_at
        return now - last >= params.measurement_interval_s

    @property
    def taken(self) -> int:
        return self.successful + self.failed + self.inconclusive

    @property
    def mean_canary_length(self) -> float | None:
        return self.canary_length_sum / self.with_length if self.with_length else None

    @property
    def mean_canary_acceptance(self) -> float | None:
        """The canary pods' per-token a over the measurements that had it."""
        return self.canary_acceptance_sum / self.with_acceptance if self.with_acceptance else None


def measure(canary: PodGroupMetrics, control: PodGroupMetrics, params: CanaryParams,
            analysis: CanaryAnalysis | None = None) -> MeasurementResult:
    """This measurement's verdict on every difference so far, ``analysis``'s and this one's."""
    sampled = _sampled(analysis or CanaryAnalysis(started_at=0.0), canary, control)
    gains, losses = sampled.length_gains, sampled.throughput_losses
    if _ratio_below_one(canary.acceptance_length, control.acceptance_length) is None:
        return MeasurementResult.INCONCLUSIVE  # no data this time: nothing to judge
    max_loss = params.max_throughput_loss_percent / 100
    if len(losses) >= 2 and _mean(losses) > max(max_loss, _half_width(losses)):
        return MeasurementResult.FAILED
    if len(gains) < 2:
        return MeasurementResult.INCONCLUSIVE  # the noise of one difference is unknown
    band = max(params.min_acceptance_length_gain_percent / 100, _half_width(gains))
    if _mean(gains) < -band:
        return MeasurementResult.FAILED
    return MeasurementResult.SUCCESSFUL if _mean(gains) > band else MeasurementResult.INCONCLUSIVE


def first_draft_speedup(canary: PodGroupMetrics, batch_size: float | None, first: FirstDraftParams) -> float | None:
    """Modelled speedup (best g up to K) of the canary's live acceptance at the observed batch; None: no data."""
    length = canary.acceptance_length
    if length is None or batch_size is None or math.isnan(length) or math.isnan(batch_size):
        return None
    a = canary.per_token_acceptance
    if a is None or math.isnan(a):
        a = acceptance_rate_from_length(length, first.speculative_tokens)
    return best_speculative_tokens(a, max(batch_size, 1.0), first.speculative_tokens, first.profile)[1]


def measure_first_draft(canary: PodGroupMetrics, control: PodGroupMetrics, batch_size: float | None,
                        params: CanaryParams, first: FirstDraftParams) -> MeasurementResult:
    """A first draft against pods that do not speculate: it must pay for speculation on its own.

    Successful: modelled speedup above ``first.min_speedup`` and throughput within maxThroughputLossPercent
    of the control pods'. Failed: the throughput loss is larger, or speculation with it would not be
    faster at all (speedup 1: best g is 0). Between the two, or without data: Inconclusive.
    """
    speedup = first_draft_speedup(canary, batch_size, first)
    if speedup is None:
        return MeasurementResult.INCONCLUSIVE
    if speedup <= 1.0 or not _throughput_ok(canary, control, params):
        return MeasurementResult.FAILED
    return MeasurementResult.SUCCESSFUL if speedup > first.min_speedup else MeasurementResult.INCONCLUSIVE


def record(analysis: CanaryAnalysis, result: MeasurementResult, canary: PodGroupMetrics, now: float,
           control: PodGroupMetrics | None = None) -> CanaryAnalysis:
    """Count the verdict; keep the canary's numbers and, with ``control``, the differences measure() judges."""
    analysis = replace(analysis, measured_at=now)
    if control is not None:
        analysis = _sampled(analysis, canary, control)
    length = canary.acceptance_length
    if length is not None and not math.isnan(length):
        analysis = replace(
            analysis,
            with_length=analysis.with_length + 1,
            canary_length_sum=analysis.canary_length_sum + length,
        )
    a = canary.per_token_acceptance
    if a is not None and not math.isnan(a):
        analysis = replace(analysis, with_acceptance=analysis.with_acceptance + 1,
                           canary_acceptance_sum=analysis.canary_acceptance_sum + a)
    if result is MeasurementResult.INCONCLUSIVE:
        return replace(analysis, inconclusive=analysis.inconclusive + 1, consecutive_successes=0)
    if result is MeasurementResult.FAILED:
        return replace(analysis, failed=analysis.failed + 1, consecutive_successes=0)
    return replace(analysis, successful=analysis.successful + 1,
                   consecutive_successes=analysis.consecutive_successes + 1)


def analysis_phase(analysis: CanaryAnalysis, params: CanaryParams, now: float) -> AnalysisPhase:
    if analysis.failed > params.failure_limit:
        return AnalysisPhase.FAILED
    if 0 < params.consecutive_success_limit <= analysis.consecutive_successes:
        return AnalysisPhase.SUCCESSFUL
    if analysis.taken < params.measurements:
        return AnalysisPhase.RUNNING
    # The last measurement judged every difference of the window (the sequential test's verdict).
    if analysis.consecutive_successes >= 1:
        return AnalysisPhase.SUCCESSFUL
    return AnalysisPhase.INCONCLUSIVE


def _throughput_ok(canary: PodGroupMetrics, control: PodGroupMetrics, params: CanaryParams) -> bool:
    """The first draft's single-measurement guard (its pods at K=0 are the control)."""
    loss = _ratio_below_one(canary.generation_throughput, control.generation_throughput)
    return loss is None or loss * 100 <= params.max_throughput_loss_percent


def _sampled(analysis: CanaryAnalysis, canary: PodGroupMetrics, control: PodGroupMetrics) -> CanaryAnalysis:
    """The analysis with this measurement's relative differences added (where both sides have data)."""
    shortfall = _ratio_below_one(canary.acceptance_length, control.acceptance_length)
    loss = _ratio_below_one(canary.generation_throughput, control.generation_throughput)
    if shortfall is not None:
        analysis = replace(analysis, length_gains=(*analysis.length_gains, -shortfall))
    if loss is not None:
        analysis = replace(analysis, throughput_losses=(*analysis.throughput_losses, loss))
    return analysis


def _ratio_below_one(value: float | None, reference: float | None) -> float | None:
    """(reference - value) / reference; None without both numbers or without a positive reference.

    Throughput is secondary: without both numbers (or without control traffic) it cannot veto.
    """
    if value is None or reference is None or math.isnan(value) or math.isnan(reference) or reference <= 0:
        return None
    return (reference - value) / reference


def _mean(values: tuple[float, ...]) -> float:
    return sum(values) / len(values)


def _half_width(values: tuple[float, ...]) -> float:
    """t x the standard error of the mean: what the measured noise allows the mean to stray by."""
    n = len(values)
    mean = _mean(values)
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return student_t(n - 1) * spread / math.sqrt(n)


# Student's t, 97.5% quantile, for 1..10 degrees of freedom; beyond, 1.96 + 2.5 / dof (within 1%).
_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def student_t(dof: int) -> float:
    if dof < 1:
        raise ValueError("Student's t needs at least one degree of freedom")
    return _T_975[dof - 1] if dof <= len(_T_975) else 1.96 + 2.5 / dof
