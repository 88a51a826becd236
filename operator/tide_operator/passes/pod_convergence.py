"""Bring pods that missed a runtime switch back to the deployment's desired state (pure).

Switches reach the pods as edges: SetSpeculation and SetCapture go to every ready pod when the
policy decides. A pod that starts later (scale-up, a crash, a node drain) comes up in the plugin's
launch state, speculation on and capture off, and would stay there. So each pass compares what
every ready pod reports with what the policy holds and repeats only what a pod missed. Drafts too:
each pod's served version is compared with the promoted pointer (the candidate on canary pods),
and a bounded number of stragglers are swapped per pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tide_contracts.registry import LAUNCH_DRAFT
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


@dataclass(frozen=True)
class CanarySpeculation:
    """A canary whose pods speculate with the candidate while the fleet does not (control/canary_speculation.py):
    they converge to speculation on with ``bands`` (None: the launch table) until it ends, then to the fleet's."""

    pods: tuple[str, ...]
    bands: Bands | None = None


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


# ---- drafts ------------------------------------------------------------------------------------
# A pod that started before a pointer flip, or missed a promotion's load (not ready then), keeps the
# draft it loaded at startup; a canary pod whose container restarted serves the pointer again.


# What the serving plugin reports for the draft a pod was launched with; a pointer may name it too.
LAUNCH_DRAFT_VERSION = LAUNCH_DRAFT


@dataclass(frozen=True)
class DraftLoad:
    """One draft a pod can be told to load, and the version a pod serving it reports."""

    version: str  # "vN", a candidate's run id, or "initial" (the launch draft)
    source: str
    expected_version: str | None = None  # checked by the pod against the manifest (promoted drafts)
    manifest_sha256: str | None = None  # the pointer's pin on the promoted manifest


@dataclass(frozen=True)
class CanaryPods:
    """The canary in progress: its candidate (a run id under candidates/, or a pooled vN under drafts/ when
    ``recalled``) and the pods serving it."""

    candidate: str
    pods: tuple[str, ...]
    recalled: bool = False


@dataclass(frozen=True)
class DesiredDrafts:
    """Every ready pod serves ``served``; during a canary its pods serve ``candidate`` instead."""

    served: DraftLoad
    candidate: DraftLoad | None = None
    canary_pods: frozenset[str] = frozenset()

    def for_pod(self, pod: str) -> DraftLoad:
        return self.candidate if self.candidate is not None and pod in self.canary_pods else self.served


@dataclass(frozen=True)
class DraftSwap:
    pod: str
    load: DraftLoad
    serving: str  # the version the pod reported

    def describe(self) -> str:
        return f"{self.pod}: draft {self.serving} -> {self.load.version}"


# Like a Deployment's default maxUnavailable: each swap pauses generation on its pod for a moment.
SWAP_FRACTION = 0.25


def swap_budget(ready_pods: int) -> int:
    """How many pods one pass may swap: a quarter of the ready pods, at least one."""
    return max(1, math.ceil(ready_pods * SWAP_FRACTION))


def draft_swaps(statuses: Mapping[str, ServingStatus | None], desired: DesiredDrafts, limit: int) -> list[DraftSwap]:
    """Ready pods whose served draft version differs from ``desired``, in name order, at most ``limit``.

    Skipped: pods that did not answer, an inert plugin, and a pod without a draft (launched without
    speculation: a load needs a restart there, not a call).
    """
    out = []
    for name, status in sorted(statuses.items()):
        if status is None or not status.engine_supported or status.draft is None:
            continue
        load = desired.for_pod(name)
        if status.draft.version != load.version:
            out.append(DraftSwap(name, load, status.draft.version))
    return out[:max(0, limit)]


def already_serving(status: ServingStatus | None, version: str, target_revision: str) -> bool:
    """The pod reports ``version`` for ``target_revision``: a load of it would re-download and re-swap the
    same files (a promoted vN is written once). A pod whose status is unknown is not: it is tried.

    The serving contract reports no manifest checksum (DraftInfo), so the version name is the check.
    """
    return (status is not None and status.draft is not None and status.draft.version == version
            and status.draft.target_revision == target_revision)
