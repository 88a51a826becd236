"""The per-deployment control-token Secret, and its rotation (pure: the live Secret in, the desired out).

Pods mount the Secret and re-read it on change (tide_contracts.control_token), so rotating needs no
restart. A user asks for a rotation by giving the TideDeployment a new value of ROTATE_ANNOTATION
(any string, e.g. a date); the Secret remembers the value it last served, so each new value rotates
exactly once. After a rotation the previous token stays in the Secret for a grace period, because
kubelets deliver a changed Secret volume a minute or two late and the operator uses the new token at
once: a pod that still has only the old file keeps answering.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from tide_operator.manifests import labels, names
from tide_operator.manifests.serving import CONTROL_AUTH_KEY, PREVIOUS_AUTH_KEY

ROTATE_ANNOTATION = "tide.dev/rotate-token"  # on the TideDeployment
ROTATED_FOR_ANNOTATION = "tide.dev/rotated-for"  # on the Secret: the request last served
PREVIOUS_EXPIRES_ANNOTATION = "tide.dev/previous-token-expires"  # on the Secret, while a previous token is kept


def rotation_request(meta: dict[str, Any]) -> str:
    return str((meta.get("annotations") or {}).get(ROTATE_ANNOTATION, ""))


def control_token_secret(name: str, namespace: str, live: dict[str, Any] | None, requested: str, now: datetime,
                         grace_s: int, new_token: Callable[[], str] = lambda: secrets.token_urlsafe(32),
                         ) -> dict[str, Any]:
    """The Secret as it should be: kept, made, or rotated once per new ``requested`` value."""
    data = _decoded(live)
    annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
    current, served = data.get(CONTROL_AUTH_KEY), annotations.get(ROTATED_FOR_ANNOTATION, "")
    previous, expires = data.get(PREVIOUS_AUTH_KEY), annotations.get(PREVIOUS_EXPIRES_ANNOTATION, "")
    if not current:  # new, or emptied by hand: nothing to keep, nothing to fall back to
        current, previous, served = new_token(), None, requested
    elif requested and requested != served:
        current, previous, served = new_token(), current, requested
        expires = (now + timedelta(seconds=grace_s)).isoformat()
    if previous and not _before(now, expires):
        previous = None
    kept = {CONTROL_AUTH_KEY: current, **({PREVIOUS_AUTH_KEY: previous} if previous else {})}
    meta_annotations = {ROTATED_FOR_ANNOTATION: served, **({PREVIOUS_EXPIRES_ANNOTATION: expires} if previous else {})}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": names.control_token_secret_name(name), "namespace": namespace,
                         "labels": labels.serving_labels(name), "annotations": meta_annotations},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in kept.items()}}


def accepted_tokens(data: dict[str, str]) -> tuple[str, ...]:
    """What the operator sends, in order: the current token, then the previous one (during a rotation)."""
    return tuple(t for t in (data.get(CONTROL_AUTH_KEY, ""), data.get(PREVIOUS_AUTH_KEY, "")) if t)


def tokens_of(secret: dict[str, Any]) -> tuple[str, ...]:
    """accepted_tokens of a Secret object as built here (base64 data): the pass hands the one it just
    applied to the pod calls, so they need no second read and a rotation applies in the same pass."""
    return accepted_tokens(_decoded(secret))


def _before(now: datetime, expires: str) -> bool:
    try:
        return now < datetime.fromisoformat(expires)
    except (TypeError, ValueError):
        return False  # no or a garbled deadline: the previous token goes


def _decoded(live: dict[str, Any] | None) -> dict[str, str]:
    raw = (live or {}).get("data") or {}
    try:
        return {k: base64.b64decode(v).decode() for k, v in raw.items()}
    except (ValueError, UnicodeDecodeError):
        return {}  # unreadable: made anew
