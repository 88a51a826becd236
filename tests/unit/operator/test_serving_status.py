"""Readiness in status: Ready needs every replica; Serving (where the control loop runs) needs one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.passes.serving_status import ServingObservation, StatusDraft, serving


@pytest.mark.parametrize(("replicas", "ready", "phase", "ready_condition", "message"), [
    (2, 0, Phase.PENDING, "False", "0/2 vLLM replicas ready"),
    (2, 1, Phase.SERVING, "False", "1/2 vLLM replicas ready"),  # one stuck pod must not stall the loop
    (2, 2, Phase.SERVING, "True", "2/2 ready"),
    (0, 0, Phase.SERVING, "True", "scaled to zero replicas"),
])
def test_phase_and_ready_condition(replicas: int, ready: int, phase: Phase, ready_condition: str,
                                   message: str) -> None:
    draft = StatusDraft(TideDeploymentStatus(), generation=3, now=datetime(2026, 12, 2, tzinfo=UTC))
    serving(draft, ServingObservation(replicas=replicas, ready_replicas=ready, selector="a=b"))
    condition = next(c for c in draft.status.conditions if c.type == "Ready")
    assert (draft.status.phase, condition.status.value, condition.message) == (phase, ready_condition, message)
    assert draft.status.replicas == ready
