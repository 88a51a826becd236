"""Drafts that serve join the draft pool's index (pool.json, tide_contracts.draft_pool; issue 16).

A promotion is recorded as it happens (effects.promote); any other way a draft comes to serve is seen at
the start of a control pass (``note_served``): the launch draft (``initial``) before anything is promoted
for the target, a version a user's rollback or promote flipped the pointer to, the spec's draftPin, the
pointer again once unpinned. Its last_served_at then orders the least-recently-served trimming right.

Best effort by design: the draft already serves, and the index only serves a later recall. A failure is
logged and returned as a Warning Event, never raised, so it can neither fail nor undo anything; the next
change writes the index again. pool.json is read only when what serves changes (remembered per
deployment in memory; after an operator restart, once, and written only if the index lacks it).
"""

from __future__ import annotations

import logging
from datetime import datetime

from botocore.exceptions import BotoCoreError, ClientError

from tide_contracts.draft_pool import for_target
from tide_contracts.registry import DraftRegistry, PromotedPointer, RegistryError
from tide_operator.api import TideDeploymentSpec
from tide_operator.passes.pod_convergence import LAUNCH_DRAFT_VERSION
from tide_operator.passes.serving_status import EventNote

DRAFT_POOL_NOT_UPDATED = "DraftPoolNotUpdated"  # Warning: a draft serves, but pool.json does not say so
DRAFT_POOL_TRIMMED = "DraftPoolTrimmed"  # Normal: versions left the index (their drafts/vN stay)
# ValueError: a manifest or a pool.json that does not parse (pydantic's ValidationError is one)
_POOL_ERRORS = (RegistryError, ClientError, BotoCoreError, OSError, ValueError)
log = logging.getLogger(__name__)

# (namespace, name) -> (target revision, version) this process last recorded (or tried to) as serving.
_SERVING: dict[tuple[str, str], tuple[str, str]] = {}


def record_promotion(registry: DraftRegistry, spec: TideDeploymentSpec, pointer: PromotedPointer,
                     now: datetime, deployment: tuple[str, str] | None = None) -> EventNote | None:
    """``pointer``'s version serves from ``now``, with its manifest's signature; the pool of this target
    (a new one for another revision or tokenizer) is bounded by spec.control.draftPool.maxDrafts, and
    the pinned draft never leaves. ``deployment`` (namespace, name): remembered, so the next pass does
    not record it again. Returns the Event to report, if any."""
    if deployment is not None:
        _SERVING[deployment] = (spec.target.revision, pointer.version)
    try:
        left = _record(registry, spec, pointer.version, now)
    except _POOL_ERRORS as e:
        log.warning("%s promoted, but the draft pool's index was not updated: %s", pointer.version, e)
        return EventNote("Warning", DRAFT_POOL_NOT_UPDATED,
                         f"{pointer.version} is promoted, but pool.json does not list it: {e}")
    return _trimmed(left, pointer.version, spec)


def note_served(registry: DraftRegistry, spec: TideDeploymentSpec, deployment: tuple[str, str],
                promoted_version: str | None, now: datetime) -> list[EventNote]:
    """What serves as a pass reads it (the pin, else the pointer for this revision, else ``initial`` when the
    spec names a launch draft: sensors.served_version) is recorded once per change. None serves nothing (the
    bootstrap head is no draft of the pool). Returns the Events to report."""
    version = spec.control.draft_pin or promoted_version
    seen = (spec.target.revision, version) if version else None
    if seen is None or _SERVING.get(deployment) == seen:
        return []
    restarted = deployment not in _SERVING
    _SERVING[deployment] = seen  # one attempt per change: a failure is reported once, not every pass
    try:
        if restarted and _listed(registry, spec, seen[1]):
            return []  # recorded before this process started
        left = _record(registry, spec, seen[1], now)
    except _POOL_ERRORS as e:
        log.warning("%s serves, but the draft pool's index was not updated: %s", seen[1], e)
        return [EventNote("Warning", DRAFT_POOL_NOT_UPDATED, f"{seen[1]} serves, but pool.json does not list it "
                          f"as served since {now.isoformat(timespec='seconds')}: {e}")]
    note = _trimmed(left, seen[1], spec)
    return [note] if note else []


def forget(namespace: str, name: str) -> None:
    """A deleted TideDeployment's memory (a new one of the same name reads the index again)."""
    _SERVING.pop((namespace, name), None)


def _record(registry: DraftRegistry, spec: TideDeploymentSpec, version: str, now: datetime) -> list[str]:
    """Touch (or add) ``version`` in the pool of this target: a vN with its manifest's signature and
    tokenizer, the launch draft with neither (nothing was captured for it)."""
    pin = spec.control.draft_pin
    manifest = None if version == LAUNCH_DRAFT_VERSION else registry.draft_manifest(version)
    if manifest is not None and manifest.target_revision != spec.target.revision:  # a pin the pods refuse
        raise ValueError(f"{version} was trained for target revision {manifest.target_revision}, "
                         f"not {spec.target.revision}")
    return registry.record_served(version, target_revision=spec.target.revision,
                                  tokenizer_hash=manifest.tokenizer_hash if manifest else None, now=now,
                                  signature=manifest.signature if manifest else None,
                                  max_drafts=spec.control.draft_pool.max_drafts, pinned={pin} if pin else set())


def _listed(registry: DraftRegistry, spec: TideDeploymentSpec, version: str) -> bool:
    current, _ = registry.pool()
    return current is not None and for_target(current, spec.target.revision, None).entry(version) is not None


def _trimmed(left: list[str], version: str, spec: TideDeploymentSpec) -> EventNote | None:
    if not left:
        return None
    return EventNote("Normal", DRAFT_POOL_TRIMMED, f"{', '.join(left)} left the draft pool's index for "
                     f"{version} (maxDrafts {spec.control.draft_pool.max_drafts}); their drafts/vN stay in the "
                     "registry")
