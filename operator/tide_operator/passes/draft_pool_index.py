"""A promotion joins the draft pool's index (pool.json, tide_contracts.draft_pool; issue 16).

Best effort by design: the promotion already stands (pointer, drafts/vN, history) when this runs, and
the index only serves a later recall. A failure is logged and returned as a Warning Event, never raised,
so it can neither fail nor undo a promotion; the next promotion writes the index again.
"""

from __future__ import annotations

import logging
from datetime import datetime

from botocore.exceptions import BotoCoreError, ClientError

from tide_contracts.registry import DraftRegistry, PromotedPointer, RegistryError
from tide_operator.api import TideDeploymentSpec
from tide_operator.passes.serving_status import EventNote

DRAFT_POOL_NOT_UPDATED = "DraftPoolNotUpdated"  # Warning: promoted, but pool.json does not list it
DRAFT_POOL_TRIMMED = "DraftPoolTrimmed"  # Normal: versions left the index (their drafts/vN stay)
# ValueError: a manifest or a pool.json that does not parse (pydantic's ValidationError is one)
_POOL_ERRORS = (RegistryError, ClientError, BotoCoreError, OSError, ValueError)
log = logging.getLogger(__name__)


def record_promotion(registry: DraftRegistry, spec: TideDeploymentSpec, pointer: PromotedPointer,
                     now: datetime) -> EventNote | None:
    """``pointer``'s version serves from ``now``, with its manifest's signature; the pool of this target
    (a new one for another revision or tokenizer) is bounded by spec.control.draftPool.maxDrafts, and
    the pinned draft never leaves. Returns the Event to report, if any."""
    pin, bound = spec.control.draft_pin, spec.control.draft_pool.max_drafts
    try:
        manifest = registry.draft_manifest(pointer.version)
        left = registry.record_served(pointer.version, target_revision=spec.target.revision,
                                      tokenizer_hash=manifest.tokenizer_hash, now=now, signature=manifest.signature,
                                      max_drafts=bound, pinned={pin} if pin else set())
    except _POOL_ERRORS as e:
        log.warning("%s promoted, but the draft pool's index was not updated: %s", pointer.version, e)
        return EventNote("Warning", DRAFT_POOL_NOT_UPDATED,
                         f"{pointer.version} is promoted, but pool.json does not list it: {e}")
    if not left:
        return None
    return EventNote("Normal", DRAFT_POOL_TRIMMED, f"{', '.join(left)} left the draft pool's index for "
                     f"{pointer.version} (maxDrafts {bound}); their drafts/vN stay in the registry")
