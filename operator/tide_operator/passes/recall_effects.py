"""The draft pool's recall on the cluster (issue 16): the evaluation Job, a recalled draft's canary and promotion.

Carried out for ClusterEffects (effects.py), whose pointer and pod helpers they share. A recalled draft
is a pooled ``drafts/vN`` and keeps its version: its canary pods load it pinned by its manifest's sha256,
and its promotion is a pointer flip (``recalled`` in the history, no copy), recorded in the pool's index
before every other pod loads it. The launch draft (``initial``) is recalled the same way: its canary pods
load spec.draft.initial as they did at launch (nothing to pin: it has no manifest), and the pointer then
names ``initial``, so pods that start later serve what they launched with.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kubernetes.client.rest import ApiException

from tide_contracts.registry import IncompatibleDraft, PromotedPointer, UnknownVersion
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.conditions import Reason
from tide_operator.control import actions as act
from tide_operator.manifests import names
from tide_operator.manifests.ownership import ChildConflict
from tide_operator.manifests.pod import s3_uri
from tide_operator.manifests.trainer import EVALUATION_DEADLINE_S, build_evaluation_job
from tide_operator.passes.capture_retention import claim_for_evaluation
from tide_operator.passes.control_loop import DraftRefused, EffectError
from tide_operator.passes.draft_pool_index import record_promotion
from tide_operator.passes.pod_convergence import LAUNCH_DRAFT_VERSION
from tide_operator.passes.serving_status import EventNote
from tide_operator.passes.storage_errors import STORAGE_ERRORS

if TYPE_CHECKING:
    from tide_operator.passes.effects import ClusterEffects


def served_for_evaluation(pointer: PromotedPointer | None, spec: TideDeploymentSpec) -> str | None:
    """The draft the pool is scored against: the pointer's vN, else the launch draft (``initial``) when the
    spec names one, else none (the bootstrap head is no draft: the report's baseline is no speculation)."""
    if pointer is not None:
        return pointer.version
    return LAUNCH_DRAFT_VERSION if spec.draft.initial else None


def launch_recall(fx: ClusterEffects, action: act.LaunchRecall) -> None:
    """Claim the shards since the shift, then create the evaluation Job (deterministic name, owned)."""
    served = served_for_evaluation(fx._current_pointer(), fx.spec)
    try:
        # The claim expires with the Job's deadline: pruning skips the shards exactly while it may run.
        deadline = claim_for_evaluation(fx.registry, fx.spec, fx.config, action.run_id, time.time(),
                                        action.captured_since, EVALUATION_DEADLINE_S)
    except STORAGE_ERRORS as e:
        raise EffectError(f"claiming the capture shards of evaluation {action.run_id}: {e}") from e
    what = f"recall evaluation Job {action.run_id}"
    try:
        job = build_evaluation_job(fx.name, fx.namespace, fx.spec, fx.placement, run_id=action.run_id,
                                   operator_config=fx.config, served_version=served,
                                   pooled_versions=action.versions, captured_since=action.captured_since,
                                   deadline_s=deadline)
        fx.cluster.create_owned(fx.adopt(job))
    except ChildConflict as e:
        raise EffectError(f"{what}: {e}", Reason.CHILD_CONFLICT) from e
    except ValueError as e:  # a version outside the pool's names, no pooled draft: not the API's fault
        raise EffectError(f"{what}: {e}", Reason.TRAINER_JOB_INVALID) from e
    except ApiException as e:
        raise EffectError(f"{what}: {e}", Reason.KUBERNETES_API_ERROR) from e


def cancel_evaluation(fx: ClusterEffects, run_id: str) -> None:
    """Delete run ``run_id``'s evaluation Job if it is there (a run is one kind or the other)."""
    try:
        fx.cluster.delete_owned_job(fx.namespace, names.evaluation_job_name(fx.name, run_id),
                                    fx._owner_uid())
    except ChildConflict as e:
        raise EffectError(f"cancel recall evaluation Job {run_id}: {e}", Reason.CHILD_CONFLICT) from e
    except ApiException as e:
        raise EffectError(f"cancel recall evaluation Job {run_id}: {e.reason}", Reason.KUBERNETES_API_ERROR) from e


def recalled_manifest_sha256(fx: ClusterEffects, version: str) -> str:
    """The pooled version's manifest checksum as stored: its canary pods verify their fetch against it."""
    try:
        sha = fx.registry.pooled_manifest_sha256(version)
    except STORAGE_ERRORS as e:
        raise EffectError(f"read the manifest of recalled draft {version}: {e}") from e
    if sha is None:  # gone from the registry: asking again cannot help
        raise DraftRefused(Reason.UNKNOWN_VERSION, f"recalled draft {version} has no drafts/{version}/manifest.json")
    return sha


def start_recalled_canary(fx: ClusterEffects, action: act.StartCanary) -> None:
    """The canary pods (exactly those chosen) load drafts/<vN>, pinned by its manifest's sha256, or the
    launch draft from where they launched with it."""
    version = action.candidate
    pods = fx._not_yet_serving(version, fx.canary_pods(action.pods))
    if version == LAUNCH_DRAFT_VERSION:
        fx.fleet.load_draft(fx._launch_draft(), None, pods)
        return
    sha = recalled_manifest_sha256(fx, version)
    fx.fleet.load_draft(s3_uri(fx.name, fx.namespace, fx.spec.storage.s3, "drafts", version), version, pods,
                        manifest_sha256=sha)


def promote_recalled(fx: ClusterEffects, action: act.Promote) -> EventNote | None:
    """The pointer back to the recalled vN (history: ``recalled``, with the evidence), the pool touched, then
    every pod not yet on it. Idempotent: a retry finds the pointer there and only serves it."""
    version = action.candidate
    try:
        pointer = fx._current_pointer()
        flipped = pointer if pointer is not None and pointer.version == version else fx.point_to(
            version, f"recalled from the draft pool: {action.message}", "recalled")
    except UnknownVersion as e:
        raise DraftRefused(Reason.UNKNOWN_VERSION, str(e)) from e
    except IncompatibleDraft as e:
        raise DraftRefused(Reason.INCOMPATIBLE_DRAFT, str(e)) from e
    except STORAGE_ERRORS as e:
        raise EffectError(f"point to recalled draft {version}: {e}") from e
    # Remembered for this deployment, so the next pass's note_served does not record it again.
    note = record_promotion(fx.registry, fx.spec, flipped, datetime.now(UTC), (fx.namespace, fx.name))
    try:
        fx._serve(flipped.version, None, flipped.manifest_sha256)
    except DraftRefused as e:  # the pointer already moved: retry the load, never roll it back
        raise EffectError(str(e)) from e
    return note
