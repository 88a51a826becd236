"""Carry out the policy's actions on the cluster, the serving pods and the S3 draft registry.

Each method is one action; any failure becomes an EffectError so the control pass keeps its old
state and retries, or a DraftRefused when a candidate's files are unfit (the pass rolls it back).
Promotion order keeps the pointer honest: the registry promotes (verified copy, conditional
pointer write) before any pod loads the new version, then records it in the draft pool's index
(pool.json): best effort, a failure there is a Warning Event and never fails or undoes the promotion.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.rest import ApiException

from tide_contracts.registry import (
    ChecksumMismatch,
    IncompatibleDraft,
    PromotedPointer,
    UnknownVersion,
)
from tide_operator.adapters.fleet import ServingPod
from tide_operator.api.conditions import Reason
from tide_operator.control import actions as act
from tide_operator.manifests import names
from tide_operator.manifests.ownership import ChildConflict, owner_uids
from tide_operator.manifests.pod import s3_uri
from tide_operator.manifests.serving import (
    full_bands,
)
from tide_operator.manifests.trainer import build_trainer_job
from tide_operator.passes import recall_effects
from tide_operator.passes.capture_retention import claim_shards
from tide_operator.passes.control_loop import DraftRefused, EffectError
from tide_operator.passes.draft_pool_index import record_promotion
from tide_operator.passes.pod_convergence import (
    LAUNCH_DRAFT_VERSION,
    CanaryPods,
    DesiredDrafts,
    DraftLoad,
    already_serving,
    draft_swaps,
    swap_budget,
)
from tide_operator.passes.pod_settings_effects import PodSettingEffects
from tide_operator.passes.serving_status import EventNote
from tide_operator.passes.storage_errors import STORAGE_ERRORS

__all__ = ["STORAGE_ERRORS", "ClusterEffects"]


@dataclass
class ClusterEffects(PodSettingEffects):
    """The policy's actions on the cluster, the pods and the registry (the pods' settings: the base class)."""

    def launch_training(self, action: act.LaunchTraining) -> None:
        pointer = self._promoted_pointer()
        # Until a draft is promoted, a run without spec.draft.initial starts from the bootstrap head the pods
        # launched with: the candidate then has its architecture and hot-swaps into them.
        parent = s3_uri(self.name, self.namespace, self.spec.storage.s3, "drafts", pointer) if pointer else (
            self._bootstrap())
        try:
            # The claim first: the trainer reads exactly the shards it names, and pruning skips them.
            # After a shift, only what was captured since it (the traffic before is another domain).
            deadline = claim_shards(self.registry, self.spec, self.config, action.run_id, time.time(),
                                    captured_since=action.captured_since)
        except STORAGE_ERRORS as e:
            raise EffectError(f"claiming the capture shards of {action.run_id}: {e}") from e
        try:
            job = build_trainer_job(self.name, self.namespace, self.spec, self.placement, run_id=action.run_id,
                                    operator_config=self.config, parent_draft=parent, deadline_s=deadline)
            # Deterministic name: after a restart our own Job is found, never repeated; one without
            # our owner UID is never used (its status would pass for our run's).
            self.cluster.create_owned(self.adopt(job))
        except ChildConflict as e:
            raise EffectError(f"trainer Job {action.run_id}: {e}", Reason.CHILD_CONFLICT) from e
        except ValueError as e:  # the Job cannot be built from this spec: say so, do not blame the API
            raise EffectError(f"trainer Job {action.run_id}: {e}", Reason.TRAINER_JOB_INVALID) from e
        except ApiException as e:
            raise EffectError(f"trainer Job {action.run_id}: {e}", Reason.KUBERNETES_API_ERROR) from e

    def launch_recall(self, action: act.LaunchRecall) -> None:
        recall_effects.launch_recall(self, action)

    def cancel_training(self, action: act.CancelTraining) -> None:
        try:
            self.cluster.delete_owned_job(self.namespace, names.trainer_job_name(self.name, action.run_id),
                                          self._owner_uid())
        except ChildConflict as e:
            raise EffectError(f"cancel trainer Job {action.run_id}: {e}", Reason.CHILD_CONFLICT) from e
        except ApiException as e:
            raise EffectError(f"cancel trainer Job {action.run_id}: {e.reason}", Reason.KUBERNETES_API_ERROR) from e
        recall_effects.cancel_evaluation(self, action.run_id)  # the run may be a recall evaluation instead

    def _owner_uid(self) -> str:
        """The UID ``adopt`` writes into the owner references of our children."""
        return next(iter(owner_uids(self.adopt({"metadata": {}}))), "")

    def start_canary(self, action: act.StartCanary) -> None:
        """Exactly the pods the lifecycle chose (and recorded); one gone since is skipped."""
        if action.recalled:  # a pooled drafts/vN pinned by its manifest's sha256, not a run's candidate
            recall_effects.start_recalled_canary(self, action)
        else:
            source = s3_uri(self.name, self.namespace, self.spec.storage.s3, "candidates", action.candidate)
            # A pod serving a candidate reports its run id as the version (its manifest names none).
            self.fleet.load_draft(source, None,
                                  self._not_yet_serving(action.candidate, self.canary_pods(action.pods)))
        if self._bootstrap() is not None and self._current_pointer() is None:
            self._canary_speculates(self.canary_pods(action.pods), full_bands(self.spec.draft.num_speculative_tokens))
        elif action.speculate:  # the fleet does not speculate: the canary pods do, with the candidate's table
            self._canary_speculates(self.canary_pods(action.pods), self._on_bands(action.tokens_per_batch_size))

    def promote(self, action: act.Promote) -> EventNote | None:
        """Promote, record in the draft pool, then load every pod; returns what the pool's index said."""
        if action.recalled:  # the pointer back to a pooled vN: no copy, no new version
            return recall_effects.promote_recalled(self, action)
        try:
            pointer = self.registry.promote(action.candidate, target_revision=self.spec.target.revision,
                                            tokenizer_hash=None, now=datetime.now(UTC), reason=action.message)
        except ChecksumMismatch as e:  # verified before anything is written: the pointer never moved
            raise DraftRefused(Reason.CHECKSUM_MISMATCH, str(e)) from e  # names the candidate's key
        except IncompatibleDraft as e:
            raise DraftRefused(Reason.INCOMPATIBLE_DRAFT, str(e)) from e
        except STORAGE_ERRORS as e:
            raise EffectError(f"promote {action.candidate}: {e}") from e
        # Before the pods: a pass retried for a pod that was away records it again (a touch, no harm).
        note = record_promotion(self.registry, self.spec, pointer, datetime.now(UTC), (self.namespace, self.name))
        source = s3_uri(self.name, self.namespace, self.spec.storage.s3, "drafts", pointer.version)
        try:  # the manifest's checksum as written at promotion, not as read back from the same prefix
            self.fleet.load_draft(source, pointer.version, self._not_yet_serving(pointer.version, None),
                                  manifest_sha256=pointer.manifest_sha256)
        except DraftRefused as e:
            # The pointer already names the new version: retry the load (promotion is idempotent
            # per run), never roll back a candidate that is already promoted.
            raise EffectError(str(e)) from e
        return note

    def roll_back(self, action: act.RollBack) -> None:
        # Pods first, the history last: a swap that fails is retried next pass, and the history
        # must not record a rejection the pass then reverses.
        # Exactly the pods that got the candidate; gone ones are skipped, convergence fixes any other.
        pointer = self._current_pointer()
        self._serve(pointer.version if pointer else None, self.canary_pods(action.pods),
                    pointer.manifest_sha256 if pointer else None)
        try:
            self.registry.record_rejection(action.candidate, now=datetime.now(UTC), reason=action.message)
        except STORAGE_ERRORS as e:
            raise EffectError(f"record rollback of {action.candidate}: {e}") from e

    def serve_draft(self, action: act.ServeDraft) -> None:
        if action.version is None and self._bootstrap() is None:
            self.fleet.set_speculation(False)
            return
        self._serve(action.version, None)

    def flip_pointer(self, action: act.FlipPointer) -> tuple[str | None, str]:
        """The pointer to an already promoted version (a user's promote or rollback), then every pod.

        Idempotent: a retry after the flip (a pod was away) finds the pointer there and only serves it.
        """
        try:
            pointer = self._current_pointer()
            version = action.version or self.registry.previous_version()
            if version is None:
                raise DraftRefused(Reason.UNKNOWN_VERSION,
                                   "the registry's history names no version served before the current one")
            flipped = pointer if pointer is not None and pointer.version == version else self.point_to(
                version, action.message, "rollback" if action.rollback else "promote", manual=True)
        except UnknownVersion as e:
            raise DraftRefused(Reason.UNKNOWN_VERSION, str(e)) from e
        except IncompatibleDraft as e:
            raise DraftRefused(Reason.INCOMPATIBLE_DRAFT, str(e)) from e
        except STORAGE_ERRORS as e:
            raise EffectError(f"flip the pointer to {action.version or 'the previous version'}: {e}") from e
        try:
            self._serve(flipped.version, None, flipped.manifest_sha256)
        except DraftRefused as e:  # the pointer moved: retry the load, as after a promotion
            raise EffectError(str(e)) from e
        return (pointer.version if pointer else None), flipped.version

    def invalidate(self, action: act.InvalidateArtifacts) -> None:
        # Captures and candidates of another target revision are ignored by every reader (the
        # trainer and the registry check the revision); deleting them is left to retention.
        return

    def canary_pods(self, pod_names: Sequence[str]) -> list[ServingPod]:
        """The named pods that are still here and ready (a canary pod may have gone since)."""
        wanted = set(pod_names)
        return sorted((p for p in self.fleet.pods if p.ready and p.name in wanted), key=lambda p: p.name)

    def converge_drafts(self, canary: CanaryPods | None) -> list[str]:
        """Swap ready pods whose served draft is not the pointer's (the candidate on canary pods).

        Bounded per pass (pod_convergence.swap_budget); pinned by the pointer's manifest sha256 as a
        promotion is. With neither a pointer nor a launch draft there is nothing to converge to.
        """
        desired = self._desired_drafts(canary)
        if desired is None:
            return []
        statuses = self.fleet.statuses(ready_only=True)
        swaps = draft_swaps(statuses, desired, swap_budget(len(statuses)))
        for load in dict.fromkeys(swap.load for swap in swaps):
            pods = self.canary_pods([swap.pod for swap in swaps if swap.load == load])
            self.fleet.load_draft(load.source, load.expected_version, pods, manifest_sha256=load.manifest_sha256)
        return [swap.describe() for swap in swaps]

    def _desired_drafts(self, canary: CanaryPods | None) -> DesiredDrafts | None:
        pointer = self._current_pointer()
        if pointer is not None and pointer.version != LAUNCH_DRAFT_VERSION:
            served = DraftLoad(pointer.version, s3_uri(self.name, self.namespace, self.spec.storage.s3, "drafts",
                                                       pointer.version), pointer.version, pointer.manifest_sha256)
        elif (launch := self._launch_source()) is not None:
            served = DraftLoad(LAUNCH_DRAFT_VERSION, launch)
        else:
            return None
        if canary is None:
            return DesiredDrafts(served)
        if canary.recalled and canary.candidate == LAUNCH_DRAFT_VERSION:  # the launch draft, as at launch
            candidate = DraftLoad(LAUNCH_DRAFT_VERSION, self._launch_draft())
        elif canary.recalled:  # a pooled vN, pinned as its canary loaded it
            candidate = DraftLoad(canary.candidate, s3_uri(self.name, self.namespace, self.spec.storage.s3, "drafts",
                                                           canary.candidate), canary.candidate,
                                  recall_effects.recalled_manifest_sha256(self, canary.candidate))
        else:
            candidate = DraftLoad(canary.candidate, s3_uri(self.name, self.namespace, self.spec.storage.s3,
                                                           "candidates", canary.candidate))
        return DesiredDrafts(served, candidate, frozenset(canary.pods))

    def _serve(self, version: str | None, pods: list[Any] | None, manifest_sha256: str | None = None) -> None:
        if version is None or version == LAUNCH_DRAFT_VERSION:
            source = self._launch_source()
            if source is None:
                self.fleet.set_speculation(False)
                return
            if self._bootstrap() is None:  # the launch draft: pods on it already (a canary's) are not swapped
                pods = self._not_yet_serving(LAUNCH_DRAFT_VERSION, pods)
            self.fleet.load_draft(source, None, pods)
            if self._bootstrap() is not None:  # back to the bootstrap head: back to K=0
                self.fleet.set_speculation(False, None, pods)
            return
        self.fleet.load_draft(s3_uri(self.name, self.namespace, self.spec.storage.s3, "drafts", version), version,
                              self._not_yet_serving(version, pods), manifest_sha256=manifest_sha256)

    def _not_yet_serving(self, version: str, pods: Sequence[ServingPod] | None) -> list[ServingPod]:
        """``pods`` (default: the ready ones) less those already serving ``version``: a retry after some
        pods swapped (one was away) loads only the others; a pod whose status cannot be read is tried."""
        statuses = self.fleet.statuses(ready_only=True)
        targets = pods if pods is not None else [p for p in self.fleet.pods if p.ready]
        return [p for p in targets if not already_serving(statuses.get(p.name), version, self.spec.target.revision)]

    # ---- start without a draft (bootstrap head, control/bootstrap.py) ---------------------------
    def _launch_source(self) -> str | None:
        return self.spec.draft.initial or self._bootstrap()

    def _promoted_pointer(self) -> str | None:
        """The promoted vN a training run starts from; None for the launch draft (spec.draft.initial is the
        trainer's default parent) or the bootstrap head."""
        pointer = self._current_pointer()
        return pointer.version if pointer and pointer.version != LAUNCH_DRAFT_VERSION else None

    def _launch_draft(self) -> str:
        """spec.draft.initial for a pointer, a canary or a flip that names ``initial``; refused without one."""
        if not self.spec.draft.initial:
            raise DraftRefused(Reason.UNKNOWN_VERSION, "'initial' names spec.draft.initial, which this deployment "
                               "does not set (it launched with the bootstrap head)")
        return self.spec.draft.initial

    def point_to(self, version: str, reason: str, action: str, manual: bool = False) -> PromotedPointer:
        """The pointer to an already promoted vN, or back to the launch draft (checked against the spec here:
        the registry does not know it)."""
        if version == LAUNCH_DRAFT_VERSION:
            self._launch_draft()
        return self.registry.point_to(version, target_revision=self.spec.target.revision, now=datetime.now(UTC),
                                      reason=reason, action=action, manual=manual)

    def _current_pointer(self) -> PromotedPointer | None:
        """The promoted pointer when it is for this target revision (None: serve the launch draft)."""
        try:
            pointer, _ = self.registry.promoted()
        except STORAGE_ERRORS as e:
            raise EffectError(f"read promoted pointer: {e}") from e
        if pointer is None or pointer.target_revision != self.spec.target.revision:
            return None
        return pointer
