"""Bring pods that missed a runtime switch back to the deployment's desired state (pure).

Switches reach the pods as edges: SetSpeculation and SetCapture go to every ready pod when the
policy decides. A pod that starts later (scale-up, a crash, a node drain) comes up in the plugin's
launch state, speculation on and capture off, and would stay there. So each pass compares what
every ready pod reports with what the policy holds and repeats only what a pod missed. Drafts need
no such step: a starting pod loads the draft the promoted pointer names by itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tide_contracts.serving_control import CaptureState, ServingStatus, SpeculationState
from tide_operator.control.actions import Bands


@dataclass(frozen=True)
class DesiredPods:
    speculation: bool
    capture: bool
    sampling_rate: float  # 0..1
    destination: str | None  # where shards go while capture is on
    bands: Bands | None = None  # while speculating; None: the launch table


@dataclass(frozen=True)
class Correction:
    """What one pod must be told again; None leaves that switch alone."""

    pod: str
    speculation: bool | None = None
    capture: bool | None = None

    def describe(self) -> str:
        parts = []
        if self.speculation is not None:
            parts.append("speculation " + ("on" if self.speculation else "off"))
        if self.capture is not None:
            parts.append("capture " + ("on" if self.capture else "off"))
        return f"{self.pod}: {', '.join(parts)}"


def corrections(statuses: Mapping[str, ServingStatus | None], desired: DesiredPods) -> list[Correction]:
    """Pods whose reported state differs from ``desired``, in name order.

    Pods that did not answer are left to the switch that fails on them; an inert plugin (untested
    vLLM) cannot be switched; speculation without runtime control needs a restart, not a call.
    """
    out = []
    for name, status in sorted(statuses.items()):
        if status is None or not status.engine_supported:
            continue
        speculation = status.speculation
        spec_fix = (desired.speculation if speculation.runtime_control and _speculation_differs(speculation, desired)
                    else None)
        capture_fix = desired.capture if _capture_differs(status.capture, desired) else None
        if spec_fix is not None or capture_fix is not None:
            out.append(Correction(name, spec_fix, capture_fix))
    return out


def _speculation_differs(speculation: SpeculationState, desired: DesiredPods) -> bool:
    if speculation.enabled != desired.speculation:
        return True
    reported = tuple(tuple(band) for band in speculation.tokens_per_batch_size or ()) or None
    return desired.speculation and reported != desired.bands


def _capture_differs(capture: CaptureState, desired: DesiredPods) -> bool:
    if capture.enabled != desired.capture:
        return True
    if not desired.capture:
        return False
    return capture.destination != desired.destination or not math.isclose(capture.sampling_rate,
                                                                          desired.sampling_rate, abs_tol=1e-9)
