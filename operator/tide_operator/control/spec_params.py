"""The typed spec's control knobs as the pure policy's parameters (seconds and fractions as numbers).

A cost profile held in a ConfigMap is read by the caller and passed in as points; a spec without
one uses the documented default profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tide_operator.api import TideDeploymentSpec
from tide_operator.api.units import duration_seconds, quantity_bytes
from tide_operator.control.canary import CanaryParams
from tide_operator.control.cost_model import DEFAULT_PROFILE, CostProfile
from tide_operator.control.drift import DriftParams
from tide_operator.control.lifecycle import CaptureParams, RecallParams, TrainingParams
from tide_operator.control.policy import PolicyParams
from tide_operator.control.speculation import DecisionParams, SpeculationMode

DEFAULT_MAX_BATCH_SIZE = 256  # vLLM's default max_num_seqs, when no pod reports its own


def fleet_max_batch_size(reported: Iterable[int | None], table: Iterable[Sequence[int]] | None = None) -> int:
    """The table's last batch size: the smallest max_num_seqs the ready pods report.

    A batch never exceeds it on the pod with the smallest one. When none reports (no pod ready, an
    older plugin), the table in force keeps its cap, so pods coming and going do not retune it.
    """
    known = [n for n in reported if n is not None and n >= 1]
    if known:
        return min(known)
    bands = list(table or ())
    return int(bands[-1][1]) if bands else DEFAULT_MAX_BATCH_SIZE


def policy_params(spec: TideDeploymentSpec, profile_points: Iterable[tuple[int, int, int]] | None = None,
                  max_batch_size: int = DEFAULT_MAX_BATCH_SIZE, observation_window_s: float = 60.0,
                  deployment_uid: str = "") -> PolicyParams:
    control = spec.control
    points = profile_points
    if points is None and control.cost_profile is not None and control.cost_profile.points:
        points = [(p.batch_size, p.draft_cost_permille, p.verify_cost_percent) for p in control.cost_profile.points]
    if points is not None:
        points = sorted(points)  # a list-map keeps the user's order; the profile interpolates by batch size
    return PolicyParams(
        target_revision=spec.target.revision,
        speculation=SpeculationMode(control.speculation.value),
        paused=control.paused,
        draft_pin=control.draft_pin,
        abort_canary=control.abort_canary,
        adaptive_speculative_tokens=control.adaptive_speculative_tokens,
        num_speculative_tokens=spec.draft.num_speculative_tokens,
        max_batch_size=max_batch_size,
        decision=DecisionParams(
            speedup_margin_percent=control.decision.speedup_margin_percent,
            hysteresis_percent=control.decision.hysteresis_percent,
            min_dwell_s=duration_seconds(control.decision.min_dwell),
            probe_interval_s=duration_seconds(control.decision.probe_interval)),
        drift=DriftParams(
            short_half_life_s=duration_seconds(control.drift.short_half_life),
            long_half_life_s=duration_seconds(control.drift.long_half_life),
            threshold_percent=control.drift.threshold_percent, min_samples=control.drift.min_samples),
        capture=CaptureParams(
            enabled=control.capture.enabled, sampling_percent=control.capture.sampling_percent,
            max_buffer_samples=control.capture.max_buffer_samples,
            max_buffer_bytes=quantity_bytes(control.capture.max_buffer_bytes),
            retention_s=duration_seconds(control.capture.retention)),
        training=TrainingParams(
            sample_threshold=control.training.sample_threshold,
            backoff_s=duration_seconds(control.training.backoff), max_failures=control.training.max_failures),
        recall=RecallParams(enabled=control.draft_pool.recall,
                            sample_threshold=control.draft_pool.recall_sample_threshold,
                            shortfall_percent=control.drift.threshold_percent),
        canary=CanaryParams(
            replicas=control.canary.replicas, analysis_window_s=duration_seconds(control.canary.analysis_window),
            min_acceptance_length_gain_percent=control.canary.min_acceptance_length_gain_percent,
            max_throughput_loss_percent=control.canary.max_throughput_loss_percent,
            failure_limit=control.canary.failure_limit,
            consecutive_success_limit=control.canary.consecutive_success_limit,
            min_promotion_interval_s=duration_seconds(control.canary.min_promotion_interval),
            measurement_interval_s=measurement_interval(duration_seconds(control.canary.analysis_window))),
        profile=CostProfile.from_spec_points(points) if points else DEFAULT_PROFILE,
        observation_window_s=observation_window_s,
        deployment_uid=deployment_uid,
    )


MEASUREMENTS_PER_WINDOW = 5
MAX_MEASUREMENT_INTERVAL_S = 60.0


def measurement_interval(analysis_window_s: float) -> float:
    """One measurement a minute (Argo's habit), but at least five in any window.

    With a fixed 60 s interval a window under a minute would end before its first measurement,
    and such an analysis is always Inconclusive: no candidate could ever be promoted.
    """
    return min(MAX_MEASUREMENT_INTERVAL_S, analysis_window_s / MEASUREMENTS_PER_WINDOW)
