"""`tide pause|resume|pin|unpin|abort|promote|rollback|rotate-token`: the edits a user would make with
`kubectl patch`, named.

Each verb is a pure function of the live object: the merge patch to send (None when the object is
already as asked) and one line that says what changes, so the CLI prints exactly what it did. Pause,
resume, pin and unpin act through the spec (Argo CD and `kubectl diff` see them); rotate-token sets
the one-shot annotation the operator serves once per value (manifests/control_token.py); abort,
promote and rollback set one-shot requests the operator's next pass consumes (control/manual.py).
The checks here are the operator's own, made early for a clear message; the operator checks again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tide_contracts.registry import LAUNCH_DRAFT
from tide_operator.control.manual import ABORT_ANNOTATION, PROMOTE_ANNOTATION, ROLLBACK_ANNOTATION
from tide_operator.manifests.control_token import ROTATE_ANNOTATION

VERSION_PATTERN = re.compile(r"^v[1-9][0-9]{0,8}$")  # api/spec_control.py: spec.control.draftPin


class VerbRefused(ValueError):
    """The verb cannot apply to this object as it is (the message says why and what to do)."""


@dataclass(frozen=True)
class Edit:
    patch: dict[str, Any] | None  # the merge patch; None: nothing to change
    summary: str  # what changed (or why nothing did), one line


def _control(obj: dict[str, Any]) -> dict[str, Any]:
    return dict((obj.get("spec") or {}).get("control") or {})


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"tidedeployment {meta.get('namespace', '')}/{meta.get('name', '')}".replace(" /", " ")


def _spec_control_edit(obj: dict[str, Any], field: str, value: object) -> Edit:
    before = _control(obj).get(field)
    shown = "unset" if before is None else _json(before)
    if before == value or (value is None and before is None):
        return Edit(None, f"{_name(obj)}: spec.control.{field} is already {shown}; nothing changed")
    after = "unset" if value is None else _json(value)
    return Edit({"spec": {"control": {field: value}}}, f"{_name(obj)}: spec.control.{field} {shown} -> {after}")


def _json(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def pause(obj: dict[str, Any]) -> Edit:
    """The operator stops acting on this deployment: no switches, no training, no promotion."""
    return _spec_control_edit(obj, "paused", True)


def resume(obj: dict[str, Any]) -> Edit:
    if not _control(obj).get("paused"):
        return Edit(None, f"{_name(obj)}: not paused; nothing changed")
    return _spec_control_edit(obj, "paused", False)


def pin(obj: dict[str, Any], version: str) -> Edit:
    if not VERSION_PATTERN.match(version):
        raise VerbRefused(f"version {version!r} is not a draft version like v3 (spec.control.draftPin)")
    return _spec_control_edit(obj, "draftPin", version)


def unpin(obj: dict[str, Any]) -> Edit:
    return _spec_control_edit(obj, "draftPin", None)


def rotate_token(obj: dict[str, Any], request: str) -> Edit:
    """A new value of the rotation annotation rotates the control token once (the operator serves it)."""
    before = ((obj.get("metadata") or {}).get("annotations") or {}).get(ROTATE_ANNOTATION)
    if before == request:
        return Edit(None, f"{_name(obj)}: rotation {request} was already requested; nothing changed")
    patch = {"metadata": {"annotations": {ROTATE_ANNOTATION: request}}}
    return Edit(patch, f"{_name(obj)}: control token rotation requested ({ROTATE_ANNOTATION}={request}); "
                       "the old token is accepted for the grace period")


def abort(obj: dict[str, Any], request: str) -> Edit:
    """The running canary rolled back at the operator's next pass (the pointer never moved)."""
    canary = _status(obj).get("canary") or {}
    if not canary.get("candidate"):
        raise VerbRefused(f"{_name(obj)}: no canary runs (phase {_status(obj).get('phase', 'unknown')}); "
                          "nothing to abort")
    return _request(obj, ABORT_ANNOTATION, request, f"abort of the canary of {canary['candidate']} requested")


def promote(obj: dict[str, Any], version: str) -> Edit:
    """Serve an already promoted version, or the launch draft (`initial`): a pointer flip, recorded as manual
    in the history."""
    if not (VERSION_PATTERN.match(version) or version == LAUNCH_DRAFT):
        raise VerbRefused(f"version {version!r} is not a draft version like v3, nor {LAUNCH_DRAFT} "
                          f"({PROMOTE_ANNOTATION})")
    _flip_allowed(obj)
    current = _served(obj)
    if current == version:
        return Edit(None, f"{_name(obj)}: already serves {version}; nothing changed")
    return _request(obj, PROMOTE_ANNOTATION, version, f"promotion of {version} requested (serving {current})")


def rollback(obj: dict[str, Any], request: str) -> Edit:
    """Back to the version served before the current one (the registry's history names it)."""
    _flip_allowed(obj)
    return _request(obj, ROLLBACK_ANNOTATION, request, f"rollback from {_served(obj)} requested")


def _flip_allowed(obj: dict[str, Any]) -> None:
    pin = _control(obj).get("draftPin")
    if pin:
        raise VerbRefused(f"{_name(obj)}: spec.control.draftPin={pin} holds the draft; unpin it first "
                          "(tide unpin), or pin another version")
    canary = _status(obj).get("canary") or {}
    if canary.get("candidate"):
        raise VerbRefused(f"{_name(obj)}: a canary of {canary['candidate']} runs; abort it first (tide abort) "
                          "or wait for its verdict")


def _request(obj: dict[str, Any], annotation: str, value: str, what: str) -> Edit:
    patch = {"metadata": {"annotations": {annotation: value}}}
    return Edit(patch, f"{_name(obj)}: {what} ({annotation}={value}); the operator acts on its next pass")


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("status") or {})


def _served(obj: dict[str, Any]) -> str:
    return str((_status(obj).get("draft") or {}).get("current") or "initial")
