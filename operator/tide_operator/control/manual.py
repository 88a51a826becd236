"""A user's one-shot requests (`tide abort|promote|rollback`): read from annotations, judged, applied.

The CLI sets an annotation on the TideDeployment; the next control pass consumes it whatever the
outcome (done, or refused with a Warning Event that says why) and the handler removes it, so a
request acts once and never lingers to fire later. A pass whose effect failed (S3 or a pod away)
keeps it for the next one. Promote and rollback flip the registry's pointer to a version promoted
before (no file moves); both are refused while spec.control.draftPin holds the draft, or while a
canary runs (abort it first): the loop's own promotion would race a hand-made one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tide_contracts.registry import LAUNCH_DRAFT
from tide_operator.control import actions as act
from tide_operator.control.drift import DriftState
from tide_operator.control.lifecycle import LifecycleState, Phase, Step
from tide_operator.control.lifecycle_canary import roll_back
from tide_operator.control.policy_types import PolicyParams, PolicyState
from tide_operator.control.probe import ProbeState

ABORT_ANNOTATION = "tide.dev/abort-canary"  # any value: roll the running canary back
PROMOTE_ANNOTATION = "tide.dev/promote"  # vN or initial: serve that promoted version or the launch draft
ROLLBACK_ANNOTATION = "tide.dev/rollback"  # any value: back to the version served before the current one
REQUEST_ANNOTATIONS = (ABORT_ANNOTATION, PROMOTE_ANNOTATION, ROLLBACK_ANNOTATION)
_VERSION = re.compile(rf"^(v[1-9][0-9]{{0,8}}|{LAUNCH_DRAFT})$")  # effects check that spec.draft.initial is set

CANARY_ABORTED = "CanaryAborted"
MANUAL_PROMOTE = "ManualPromote"
MANUAL_ROLLBACK = "ManualRollback"
REQUEST_REFUSED = "RequestRefused"


@dataclass(frozen=True)
class ManualRequest:
    abort_canary: bool = False
    promote: str | None = None  # the annotation's value as written (checked in flip_request)
    rollback: bool = False
    keys: tuple[str, ...] = ()  # the annotations present: the pass that reads them consumes them all


def manual_request(annotations: Mapping[str, str] | None) -> ManualRequest:
    present = {key: str(value) for key, value in (annotations or {}).items() if key in REQUEST_ANNOTATIONS}
    return ManualRequest(abort_canary=ABORT_ANNOTATION in present, promote=present.get(PROMOTE_ANNOTATION),
                         rollback=ROLLBACK_ANNOTATION in present, keys=tuple(sorted(present)))


def unconsumed(annotations: Mapping[str, str], consumed: Mapping[str, str]) -> dict[str, str]:
    """The annotations without the requests a pass already acted on in this same version of the object.

    Kopf runs every handler of one event on the same body and patches after the last, so a second pass
    in that cycle (or a timer in between) would see a request its predecessor consumed.
    """
    return {key: value for key, value in annotations.items() if consumed.get(key) != value}


@dataclass(frozen=True)
class Refusal:
    annotation: str
    message: str


def abort_request(request: ManualRequest, lifecycle: LifecycleState, now: float) -> Step | Refusal | None:
    """The running canary rolled back, like a failed one (the pointer never moved)."""
    if not request.abort_canary:
        return None
    if lifecycle.phase is not Phase.CANARY:
        return Refusal(ABORT_ANNOTATION, f"no canary runs (lifecycle {lifecycle.phase.value}); nothing to abort")
    return roll_back(lifecycle, now, CANARY_ABORTED, f"aborted by hand ({ABORT_ANNOTATION})")


def flip_request(request: ManualRequest, state: PolicyState, params: PolicyParams) -> act.FlipPointer | Refusal | None:
    if request.promote is None and not request.rollback:
        return None
    annotation = PROMOTE_ANNOTATION if request.promote is not None else ROLLBACK_ANNOTATION
    refused = _flip_refused(request, state.lifecycle, params)
    if refused is not None:
        return Refusal(annotation, refused)
    if request.promote is not None:
        return act.FlipPointer(request.promote, False, MANUAL_PROMOTE,
                               f"{request.promote} promoted by hand ({annotation})", annotation)
    return act.FlipPointer(None, True, MANUAL_ROLLBACK, f"rolled back by hand to the version served before "
                                                        f"({annotation})", annotation)


def _flip_refused(request: ManualRequest, lifecycle: LifecycleState, params: PolicyParams) -> str | None:
    if request.promote is not None and request.rollback:
        return f"{PROMOTE_ANNOTATION} and {ROLLBACK_ANNOTATION} are both set: ask for one"
    if request.promote is not None and not _VERSION.match(request.promote):
        return f"{request.promote!r} is not a draft version like v3 (or {LAUNCH_DRAFT}, the launch draft)"
    if params.draft_pin is not None:
        return f"spec.control.draftPin={params.draft_pin} holds the draft: unpin first"
    if lifecycle.phase is Phase.CANARY:
        return f"a canary of {lifecycle.candidate} runs: abort it first or wait for its verdict"
    return None


def after_flip(state: PolicyState, params: PolicyParams, now: float) -> PolicyState:
    """Another draft serves: what the loop knew of the old one no longer describes it.

    The old estimate stays only as a prior (the next measurement replaces it, the table is retuned
    from it); the drift detector warms up again on the new draft, ignoring the rate window that
    still holds the old one's numbers; the probe tracks the new draft from scratch.
    """
    return replace(state, drift=DriftState(hold_until=now + params.observation_window_s), shift_active=False,
                   rise_active=False, probe=ProbeState(best_acceptance=state.acceptance_estimate),
                   table_acceptance=None)
