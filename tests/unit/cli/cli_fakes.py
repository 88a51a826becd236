"""Fake TideDeployment objects, Events and Prometheus answers for the CLI's unit tests."""

from __future__ import annotations

import math

from tide_operator.cli.kube import EventNote
from tide_operator.cli.timeline import Series

NOW_S = 1_764_680_400.0  # 2025-12-02T13:00:00Z
START_S = NOW_S - 3600


def tide_deployment(**status: object) -> dict:
    return {
        "apiVersion": "tide.dev/v1alpha1", "kind": "TideDeployment",
        "metadata": {"name": "chat", "namespace": "llm", "generation": 4},
        "status": {
            "phase": "Training", "observedGeneration": 4,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "ReplicasReady", "message": "2/2 ready",
                 "lastTransitionTime": "2025-12-02T10:00:00Z"},
                {"type": "Training", "status": "True", "reason": "TrainerRunning", "message": "run r7",
                 "lastTransitionTime": "2025-12-02T12:55:00Z"},
            ],
            "inferencePool": {"gpuClass": "H100", "nodes": 2, "replicas": 2, "replicasReady": 2},
            "trainingPool": {"gpuClass": "MI250", "nodes": 1},
            "draft": {"current": "v3", "candidate": "r7", "servedRevision": "0e9e39f"},
            "speculation": {"enabled": True, "numSpeculativeTokens": 3, "modelledSpeedupPercent": 135,
                            "acceptanceLengthMilli": 2340},
            "lastDecision": {"time": "2025-12-02T12:55:00Z", "action": "LaunchTraining", "reason": "BufferFilled",
                             "message": "2048 new samples"},
            **status,
        },
    }


EVENTS = [
    EventNote("2025-12-02T12:20:00Z", "Normal", "Promoted", "Promote: v3 beat v2 by 6% acceptance length"),
    EventNote("2025-12-02T12:40:00Z", "Warning", "CanaryAborted", "RollBack: r6 lost 8% throughput"),
    EventNote("2025-12-02T12:55:00Z", "Normal", "BufferFilled", "LaunchTraining: 2048 new samples"),
]


def wave(base: float, swing: float, period_s: float = 900, step_s: float = 30) -> tuple[tuple[float, float], ...]:
    n = int((NOW_S - START_S) / step_s) + 1
    return tuple((START_S + i * step_s, base + swing * math.sin(i * step_s / period_s * 2 * math.pi))
                 for i in range(n))


def fake_prometheus(expr: str) -> list[Series]:
    """Answers `Queries`' expressions the way Prometheus would for a deployment with two drafts."""
    if "vllm:spec_decode" in expr and "by (version)" in expr:
        v2 = tuple(p for p in wave(1.9, 0.1) if p[0] < START_S + 2400)
        v3 = tuple((t, 2.3 + 0.05 * math.cos(t / 300)) for t, _ in wave(0, 0) if t >= START_S + 2400)
        return [Series("v2", v2), Series("v3", v3)]
    if "tide_speculation_enabled" in expr:
        return [Series("", tuple((t, 0.0 if START_S + 1200 <= t < START_S + 1800 else 1.0) for t, _ in wave(0, 0)))]
    if "vllm:num_requests_running" in expr:
        return [Series("", wave(24, 18))]
    return []
