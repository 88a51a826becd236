"""Restart safety: the lifecycle state to and from status, corrected by what the cluster shows.

A restarted operator must neither lose nor repeat work: the state comes back from status, and
the trainer Jobs found (their names derive from deterministic run ids) correct it.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from tide_operator.control.canary import CanaryAnalysis
from tide_operator.control.lifecycle import LifecycleState, Phase, run_number


def lifecycle_to_dict(state: LifecycleState) -> dict[str, Any]:
    """Plain JSON-able data for status (enums as their string values)."""
    data = asdict(state)
    data["phase"] = state.phase.value
    return data


def lifecycle_from_dict(data: dict[str, Any]) -> LifecycleState:
    fields = dict(data)
    fields["phase"] = Phase(fields.get("phase", Phase.COLLECTING.value))
    canary = fields.get("canary")
    fields["canary"] = CanaryAnalysis.from_dict(canary) if canary is not None else None
    fields["canary_pods"] = tuple(fields.get("canary_pods", ()))  # JSON gives a list
    bands = fields.get("canary_bands")
    fields["canary_bands"] = tuple(tuple(band) for band in bands) if bands is not None else None
    return LifecycleState(**fields)


def rebuild_lifecycle(status: dict[str, Any] | None, job_run_ids: list[str], now: float) -> LifecycleState:
    """The state after an operator restart: status when present, corrected by the trainer Jobs found.

    Job names are deterministic, so the run counter never goes backwards (no duplicate run id) and
    a Job that status does not know about (status write lost) is adopted instead of relaunched.
    """
    state = lifecycle_from_dict(status) if status else LifecycleState(phase_since=now)
    numbered = {n: r for r in job_run_ids if (n := run_number(r)) is not None}
    if numbered and max(numbered) > state.run_counter:
        newest = numbered[max(numbered)]
        state = replace(state, run_counter=max(numbered), last_run=newest)
        if state.phase in (Phase.SERVING, Phase.COLLECTING) and state.active_run is None:
            state = replace(state, phase=Phase.TRAINING, phase_since=now, active_run=newest)
    return state
