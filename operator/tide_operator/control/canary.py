"""Canary analysis in Argo Rollouts' vocabulary: measurements, successCondition, failureLimit.

Each measurement compares canary pods with control pods: acceptance length is primary (it does
not depend on hardware noise), generation throughput per pod is secondary.
successCondition: canary_length >= control_length * (1 + gain) and throughput loss <= max loss.
failureCondition: canary_length < control_length / (1 + gain) (clearly worse than the served draft)
or throughput loss > max loss. Neither (or missing data) makes a measurement Inconclusive: the
band is symmetric because one noisy minute used to fail a candidate 6% better (policy bench).
More failed measurements than failureLimit fails the analysis at once. consecutiveSuccessLimit
successful measurements in a row succeed it at once (Argo Rollouts 1.8's field of that name): a
clearly better draft need not wait out the window. At the end of the window the analysis succeeds
only if successes outnumber inconclusive measurements; otherwise it is Inconclusive, which like a
failure keeps the old draft.

A first draft (the pods ran only the bootstrap head at K=0) has no served draft to beat:
measure_first_draft judges its live acceptance by the cost model's speedup at the observed load,
with the same throughput guard against the pods that do not speculate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum

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


@dataclass(frozen=True)
class PodGroupMetrics:
    """Live metrics of one group of pods (canary or control) over the last rate window."""

    acceptance_length: float | None  # 1.0 = no speculation
    generation_throughput: float | None  # tokens/s per pod


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
    """Counts of measurements so far (plain data: it survives an operator restart in status)."""

    started_at: float
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    canary_length_sum: float = 0.0  # over measurements with data, to seed the promoted estimate
    with_length: int = 0
    measured_at: float | None = None
    consecutive_successes: int = 0  # the current run of successful measurements

    def due(self, params: CanaryParams, now: float) -> bool:
        """A measurement is due one interval after the start or the previous measurement."""
        last = self.started_at if self.measured_at is None else self.measured_at
        return now - last >= params.measurement_interval_s

    @property
    def mean_canary_length(self) -> float | None:
        return self.canary_length_sum / self.with_length if self.with_length else None


def measure(canary: PodGroupMetrics, control: PodGroupMetrics, params: CanaryParams) -> MeasurementResult:
    values = (canary.acceptance_length, control.acceptance_length)
    if any(v is None or math.isnan(v) for v in values):
        return MeasurementResult.INCONCLUSIVE
    assert canary.acceptance_length is not None
    assert control.acceptance_length is not None
    gain = 1 + params.min_acceptance_length_gain_percent / 100
    if canary.acceptance_length < control.acceptance_length / gain or not _throughput_ok(canary, control, params):
        return MeasurementResult.FAILED
    if canary.acceptance_length >= control.acceptance_length * gain:
        return MeasurementResult.SUCCESSFUL
    return MeasurementResult.INCONCLUSIVE


def first_draft_speedup(canary: PodGroupMetrics, batch_size: float | None, first: FirstDraftParams) -> float | None:
    """Modelled speedup (best g up to K) of the canary's live acceptance at the observed batch; None: no data."""
    length = canary.acceptance_length
    if length is None or batch_size is None or math.isnan(length) or math.isnan(batch_size):
        return None
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


def record(analysis: CanaryAnalysis, result: MeasurementResult, canary: PodGroupMetrics, now: float) -> CanaryAnalysis:
    analysis = replace(analysis, measured_at=now)
    length = canary.acceptance_length
    if length is not None and not math.isnan(length):
        analysis = replace(
            analysis,
            with_length=analysis.with_length + 1,
            canary_length_sum=analysis.canary_length_sum + length,
        )
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
    if now - analysis.started_at < params.analysis_window_s:
        return AnalysisPhase.RUNNING
    if analysis.successful >= 1 and analysis.successful > analysis.inconclusive:
        return AnalysisPhase.SUCCESSFUL
    return AnalysisPhase.INCONCLUSIVE


def _throughput_ok(canary: PodGroupMetrics, control: PodGroupMetrics, params: CanaryParams) -> bool:
    # Throughput is secondary: without both numbers (or without control traffic) it cannot veto.
    if canary.generation_throughput is None or control.generation_throughput is None:
        return True
    if math.isnan(canary.generation_throughput) or math.isnan(control.generation_throughput):
        return True
    if control.generation_throughput <= 0:
        return True
    loss = (control.generation_throughput - canary.generation_throughput) / control.generation_throughput
    return loss * 100 <= params.max_throughput_loss_percent
