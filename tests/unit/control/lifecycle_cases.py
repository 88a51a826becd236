"""What the lifecycle's unit tests build their passes from: the parameters, one pass's inputs, a state."""

from __future__ import annotations

from tide_operator.control.canary import CanaryParams
from tide_operator.control.lifecycle import LifecycleInput, LifecycleParams, LifecycleState, Phase, TrainingParams

PARAMS = LifecycleParams(
    training=TrainingParams(sample_threshold=100, backoff_s=600, max_failures=3),
    canary=CanaryParams(analysis_window_s=300, measurement_interval_s=60, min_promotion_interval_s=1800),
)
REV = "rev-1"


def inputs(**kwargs: object) -> LifecycleInput:
    base = {"shift": False, "buffer_samples": 0, "served_acceptance_length": 2.0, "target_revision": REV}
    return LifecycleInput(**(base | kwargs))  # type: ignore[arg-type]


def state(phase: Phase, **kwargs: object) -> LifecycleState:
    fields = {"phase": phase, "phase_since": 0.0, "target_revision": REV, "capture_enabled": True} | kwargs
    return LifecycleState(**fields)  # type: ignore[arg-type]
