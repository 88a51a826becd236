"""Carry out the policy's actions on the cluster, the serving pods and the S3 draft registry.

Each method is one action; any failure becomes an EffectError so the control pass keeps its old
state and retries, or a DraftRefused when a candidate's files are unfit (the pass rolls it back).
Promotion order keeps the pointer honest: the registry promotes (verified copy, conditional
pointer write) before any pod loads the new version, then records it in the draft pool's index
(pool.json): best effort, a failure there is a Warning Event and never fails or undoes the promotion.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.rest import ApiException

from tide_contracts.registry import (
    ChecksumMismatch,
    DraftRegistry,
    IncompatibleDraft,
    PromotedPointer,
    UnknownVersion,
)
from tide_contracts.serving_control import ServingStatus
from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.fleet import Fleet, RestartRequired, ServingPod
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.conditions import Reason
from tide_operator.config import OperatorConfig
from tide_operator.control import actions as act
from tide_operator.control.cost_model import CostProfile
from tide_operator.control.placement import Placement
from tide_operator.control.serving_groups import ClassTables
from tide_operator.control.speculation import DecisionParams
from tide_operator.manifests import names
from tide_operator.manifests.ownership import ChildConflict, owner_uids
from tide_operator.manifests.pod import s3_uri
from tide_operator.manifests.serving import (
    OFF_BANDS,
    build_serving_configmap,
    full_bands,
    launch_bands_of,
)
from tide_operator.manifests.serving_fleet import serving_deployments
from tide_operator.manifests.trainer import bootstrap_location, build_trainer_job
from tide_operator.passes import recall_effects
from tide_operator.passes.capture_retention import claim_shards
from tide_operator.passes.control_loop import DraftRefused, EffectError
from tide_operator.passes.draft_pool_index import record_promotion
from tide_operator.passes.pod_convergence import (
    LAUNCH_DRAFT_VERSION,
    CanaryPods,
    CanarySpeculation,
    DesiredDrafts,
    DesiredPods,
    DraftLoad,
    already_serving,
    corrections,
    draft_swaps,
    swap_budget,
)
from tide_operator.passes.serving_groups import launched_deployment
from tide_operator.passes.serving_status import EventNote
from tide_operator.passes.storage_errors import STORAGE_ERRORS

__all__ = ["STORAGE_ERRORS", "ClusterEffects"]

# What pods report for the launch draft ("initial") or a promoted one (a registry version vN).
_LAUNCH_OR_PROMOTED = re.compile(r"^(initial|v[1-9][0-9]*)$")


@dataclass
class ClusterEffects:
    name: str
    namespace: str
    spec: TideDeploymentSpec
    placement: Placement
    config: OperatorConfig
    cluster: Cluster
    fleet: Fleet
    registry: DraftRegistry
    adopt: Any
    class_profiles: Mapping[str, CostProfile] = field(default_factory=dict)  # serving groups' own (by class)

    def set_speculation(self, action: act.SetSpeculation) -> str | None:
        """Live through the plugin; pods that can switch only by a restart are rolled (returns why)."""
        # The policy's table (adaptiveSpeculativeTokens) replaces the engine's per-batch-size table live;
        # a serving group with its own cost profile gets its own table (serving_groups.ClassTables).
        try:
            for bands, pods in self._by_table(action.tokens_per_batch_size, action.acceptance):
                self.fleet.set_speculation(action.enabled, self._on_bands(bands), pods)
        except RestartRequired as refused:
            return self._roll_speculation(action, refused)
        return None

    def _by_table(self, fleet_bands: act.Bands | None,
                  acceptance: float | None) -> list[tuple[act.Bands | None, list[ServingPod] | None]]:
        decision = self.spec.control.decision
        off = DecisionParams(decision.speedup_margin_percent, decision.hysteresis_percent).off_threshold
        tables = ClassTables(self.class_profiles, self.spec.draft.num_speculative_tokens, off)
        return tables.by_table(self.fleet.pods, fleet_bands, acceptance)

    def _roll_speculation(self, action: act.SetSpeculation, refused: RestartRequired) -> str | None:
        bands = self._on_bands(action.tokens_per_batch_size) if action.enabled else OFF_BANDS
        live = launched_deployment(self.name, self.placement,
                                   lambda dep: self.cluster.deployment(self.namespace, dep))
        if launch_bands_of(live) == bands:
            return None  # already rolled this way: the refusals come from pods still being replaced
        try:
            for child in (build_serving_configmap(self.name, self.namespace, self.spec, self._bootstrap(),
                                                  launch_bands=bands),
                          *serving_deployments(self.name, self.namespace, self.spec, self.placement, self.config,
                                               bootstrap_draft=self._bootstrap(), launch_bands=bands)):
                self.cluster.apply(self.adopt(child))
        except ChildConflict as e:
            raise EffectError(f"rolling the serving pods for speculation: {e}", Reason.CHILD_CONFLICT) from e
        except (ValueError, ApiException) as e:
            raise EffectError(f"rolling the serving pods for speculation: {e}", Reason.KUBERNETES_API_ERROR) from e
        how = "off (K=0 at every batch size)" if not action.enabled else (
            f"on with {len(bands)} batch-size band(s)" if bands else "on")
        return (f"the pods switch speculation only by a restart ({str(refused)[:300]}): rolling them with "
                f"speculation {how}")

    def set_capture(self, action: act.SetCapture) -> None:
        desired = self._desired(speculation=False, capture=action.enabled)
        self.fleet.set_capture(action.enabled, desired.sampling_rate, desired.destination)

    def converge(self, speculation: bool, capture: bool, bands: act.Bands | None = None,
                 canary: CanarySpeculation | None = None, acceptance: float | None = None) -> list[str]:
        """Repeat the switches a pod missed (it started after them, or a fleet-wide switch reached a canary pod
        that speculates on its own); returns what was corrected. ``acceptance``: what ``bands`` were made for."""
        desired = replace(self._desired(speculation, capture), bands=self._on_bands(bands) if speculation else None)
        statuses = self.fleet.statuses(ready_only=True)
        own = self._canary_speculation(statuses, desired, canary) if not speculation else {}
        if speculation:  # a serving group with its own cost profile converges on its own table
            own |= {p.name: replace(desired, bands=self._on_bands(b)) for b, pods in self._by_table(bands, acceptance)
                    if b != bands for p in pods or ()}
        by_name = {p.name: p for p in self.fleet.pods}
        fixes = []
        for name, status in sorted(statuses.items()):
            wanted = own.get(name, desired)
            for fix in corrections({name: status}, wanted):
                if fix.speculation is not None:
                    self.fleet.set_speculation(fix.speculation, wanted.bands, [by_name[name]])
                if fix.capture is not None:
                    self.fleet.set_capture(fix.capture, desired.sampling_rate, desired.destination, [by_name[name]])
                fixes.append(fix)
        return [fix.describe() for fix in fixes]

    def _canary_speculation(self, statuses: Mapping[str, ServingStatus | None], desired: DesiredPods,
                            canary: CanarySpeculation | None) -> dict[str, DesiredPods]:
        """Canary pods that speculate while the fleet does not: a first draft's (K), or a canary's (its bands)."""
        first = replace(desired, speculation=True, bands=full_bands(self.spec.draft.num_speculative_tokens))
        own = dict.fromkeys(self._first_draft_canaries(statuses), first)
        if canary is not None:
            alone = replace(desired, speculation=True, bands=self._on_bands(canary.bands))
            own.update(dict.fromkeys((p for p in canary.pods if p in statuses), alone))
        return own

    def _desired(self, speculation: bool, capture: bool) -> DesiredPods:
        destination = s3_uri(self.name, self.namespace, self.spec.storage.s3, "captures") + "/"
        return DesiredPods(speculation, capture, self.spec.control.capture.sampling_percent / 100,
                           destination if capture else None)

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
    def _bootstrap(self) -> str | None:
        """The bootstrap head the pods launch with when the spec names no initial draft (control passes
        run only once it is launched: reconcile waits for it)."""
        return None if self.spec.draft.initial else bootstrap_location(self.name, self.namespace, self.spec)

    def _launch_source(self) -> str | None:
        return self.spec.draft.initial or self._bootstrap()

    def _on_bands(self, bands: act.Bands | None) -> act.Bands | None:
        """Pods launched with the head at K=0 hear "on, launch table" as K=0: give them K explicitly."""
        if bands is None and self._bootstrap() is not None:
            return full_bands(self.spec.draft.num_speculative_tokens)
        return bands

    def _canary_speculates(self, pods: list[ServingPod], bands: act.Bands | None) -> None:
        """The canary pods draft with the candidate while the others do not (the throughput control): a first
        draft's (the others at K=0), or any canary while the fleet's switch is off. Rollback and promotion
        return them to the fleet's setting through convergence (control_loop._converge).

        Pods that switch only by a restart cannot: their canary measures nothing and ends Inconclusive.
        """
        with contextlib.suppress(RestartRequired):
            self.fleet.set_speculation(True, bands, pods)

    def _first_draft_canaries(self, statuses: Mapping[str, ServingStatus | None]) -> set[str]:
        """Without a promoted draft, pods serving a candidate (not the head, not a vN) are a first canary."""
        if self._bootstrap() is None:
            return set()
        return {pod for pod, status in statuses.items() if status is not None and status.draft is not None
                and not _LAUNCH_OR_PROMOTED.match(status.draft.version)}

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

