"""'Ours': the operator's own control pass (control_loop.control_pass) on a simulated cluster.

SimEffects implements control_loop.Effects the way effects.ClusterEffects carries each action out
(spec.draft.initial is set, so the bootstrap-head paths do not apply):
- SetSpeculation: every ready pod switches live with the policy's table (None = the launch table),
  a probe's table included; Pod.g_at looks it up at the true batch size each step, as vLLM's
  per-batch-size lookup does (the policy's K never exceeds the launch numSpeculativeTokens).
- SetCapture: capture on or off on every pod.
- LaunchTraining: a trainer Job from the pointer's draft on the window claim_shards claims: the newest
  of the buffer, since the shift when the action carries its time (topped up to sampleThreshold).
- LaunchRecall: an evaluation Job (world.launch_recall) scores the pooled drafts on the window claimed
  since the shift (topped up to recallSampleThreshold), for the world's recall_s on a training GPU.
- CancelTraining: the Job (trainer or evaluation) is deleted: it never posts a result.
- StartCanary: exactly the chosen pods load the candidate; with ``speculate`` (the fleet does not
  speculate) they switch on with its table, else their speculation is the fleet's.
- Promote: the pointer moves to vN (a recalled candidate: to its own version, no copy; a recalled
  `initial` back to the launch draft, which the pods load again); every ready pod loads it, and the
  draft pool's index records it (tide_contracts.draft_pool.served, as production's record_promotion:
  bounded by maxDrafts, least recently served out).
- The pool's index is kept as production keeps it: before each pass what serves is recorded once per
  change (draft_pool_index.note_served), so the launch draft `initial` enters it at the first pass,
  without a signature; the lifecycle is offered every pooled version but the served one, `initial`
  included, most recently served first (sensors.pooled_drafts).
- RollBack: the canary pods load the pointer's draft again.
- ServeDraft: every pod loads the named version (None: the launch draft).
- InvalidateArtifacts: a no-op in production (readers ignore other revisions); a no-op here.
- converge: as production's, every pod whose switch or table differs from the fleet's (the probe's while
  one runs; a canary's own for its pods while it speculates alone) is switched. Pods never restart here,
  so this corrects only a fleet-wide switch that reached a canary pod speculating alone, and returns
  canary pods to the fleet's setting once their canary ended (elsewhere production returns [] too);
  converge_drafts swaps any pod whose draft is not the pointer's (or the canary's candidate).
The sensors are read_sensors' composition from the world: Prometheus' view (served version's pods
for acceptance, else every pod but the canary's; canary and control groups with throughput per
engine), the buffer since the last launch, the trainer Job's outcome (exit 7 = NotBetter with its
numbers) and the ready pods.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from bench.policy_sim import prometheus as prom
from bench.policy_sim.world import (
    MAX_BATCH_SIZE,
    RATE_WINDOW_S,
    REPLICAS,
    Deployment,
    Draft,
    G,
    RecallJob,
    World,
    capture_objects,
)
from tide_contracts.draft_pool import DEFAULT_MAX_DRAFTS, DraftPool, served
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.control import actions as act
from tide_operator.control.draft_return import TrafficSignatures, against_pool, return_windows
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.lifecycle import RecallObservation, TrainingObservation, TrainingStatus
from tide_operator.control.policy import Observation, PolicyParams, PolicyState
from tide_operator.control.spec_params import policy_params
from tide_operator.passes.control_loop import SensorReading, control_pass
from tide_operator.passes.pod_convergence import CanaryPods, CanarySpeculation
from tide_operator.passes.serving_status import StatusDraft

SPEC = {  # the product's defaults: only what a TideDeployment must say
    "target": {"model": "s3://models/target", "revision": "rev-1"},
    "draft": {"method": "eagle3", "initial": "s3://drafts/launch", "numSpeculativeTokens": G},
    "inference": {"replicas": REPLICAS, "gpusPerReplica": 1},
    "training": {"gpusPerJob": 1},
    "storage": {"s3": {"bucket": "bench"}},
}


def operator_params(spec: dict | None = None) -> PolicyParams:
    """What run_control builds: policy_params of the spec, the pods' max_num_seqs, the rate window."""
    typed = TideDeploymentSpec.model_validate_json(json.dumps(spec or SPEC))
    return policy_params(typed, max_batch_size=MAX_BATCH_SIZE, observation_window_s=RATE_WINDOW_S)


@dataclass
class SimEffects:
    world: World
    dep: Deployment
    now: float = 0.0
    sample_threshold: int = 0  # spec.control.training.sampleThreshold: the claim's minimum after a shift
    recall_threshold: int = 0  # spec.control.draftPool.recallSampleThreshold: the evaluation's claim
    max_drafts: int = DEFAULT_MAX_DRAFTS
    pool: DraftPool = field(default_factory=lambda: DraftPool(target_revision=SPEC["target"]["revision"]))
    recorded: str | None = None  # what the pool was last told serves (production's _SERVING memory)

    def note_served(self) -> None:
        """draft_pool_index.note_served before a pass: what serves enters or touches the pool once per change."""
        if self.dep.pointer.name != self.recorded:
            self._record(self.dep.pointer.name)

    def set_speculation(self, action: act.SetSpeculation) -> str | None:
        for pod in self.dep.pods:
            pod.enabled, pod.bands = action.enabled, action.tokens_per_batch_size if action.enabled else None
        return None

    def set_capture(self, action: act.SetCapture) -> None:
        self.dep.capture = action.enabled

    def launch_training(self, action: act.LaunchTraining) -> None:
        self.world.launch_training(self.dep, action.run_id, self.now, action.captured_since, self.sample_threshold)

    def launch_recall(self, action: act.LaunchRecall) -> None:
        self.world.launch_recall(self.dep, action.run_id, self.now, action.versions, action.captured_since,
                                 self.recall_threshold)

    def cancel_training(self, action: act.CancelTraining) -> None:
        if self.dep.job is not None and self.dep.job.run_id == action.run_id:
            self.dep.job = None

    def start_canary(self, action: act.StartCanary) -> None:
        self._load(self.dep.versions[action.candidate], set(action.pods))
        if action.speculate:
            for pod in self.dep.pods:
                if pod.name in action.pods:
                    pod.enabled, pod.bands = True, action.tokens_per_batch_size

    def promote(self, action: act.Promote) -> None:
        if action.recalled:
            promoted = self.dep.pointer = self.dep.versions[action.candidate]
        else:
            self.dep.promotions += 1
            candidate = self.dep.versions[action.candidate]
            promoted = Draft(f"v{self.dep.promotions}", candidate.live, candidate.signature)
            self.dep.versions[promoted.name] = self.dep.pointer = promoted
        self._record(promoted.name)  # record_promotion: the next pass's note_served does not record it again
        self._load(promoted, None)

    def roll_back(self, action: act.RollBack) -> None:
        self._load(self.dep.pointer, set(action.pods))

    def serve_draft(self, action: act.ServeDraft) -> None:
        self._load(self.dep.versions[action.version] if action.version else self.world.launch, None)

    def invalidate(self, action: act.InvalidateArtifacts) -> None:
        return  # production: readers ignore other revisions, retention deletes them

    def converge(self, speculation: bool, capture: bool, bands: act.Bands | None = None,
                 canary: CanarySpeculation | None = None, acceptance: float | None = None) -> list[str]:
        fixed = []  # one class, one table: the acceptance the table was made for changes nothing here
        for pod in self.dep.pods:
            on, table = (True, canary.bands) if canary is not None and pod.name in canary.pods else (
                speculation, bands if speculation else None)
            if pod.enabled != on or (on and pod.bands != table):  # pod_convergence._speculation_differs
                pod.enabled, pod.bands = on, table
                fixed.append(f"{pod.name}: speculation {'on' if on else 'off'}")
        return fixed

    def converge_drafts(self, canary: CanaryPods | None) -> list[str]:
        swapped = []
        for pod in self.dep.pods:
            wanted = self.dep.pointer
            if canary is not None and pod.name in canary.pods:
                wanted = self.dep.versions[canary.candidate]
            if pod.draft.name != wanted.name:
                pod.draft = wanted
                swapped.append(f"{pod.name}: {wanted.name}")
        return swapped

    def _record(self, version: str) -> None:
        draft = self.dep.versions.get(version)  # the manifest's signature; the launch draft has none
        self.pool, _ = served(self.pool, version, self.now, draft.signature if draft else None,
                              max_drafts=self.max_drafts)
        self.recorded = version

    def _load(self, draft: Draft, pods: set[str] | None) -> None:
        for pod in self.dep.pods:
            if pods is None or pod.name in pods:
                pod.draft = draft


def sense(world: World, dep: Deployment, state: PolicyState, t: float,
          pool: DraftPool | None = None, recall_threshold: int = 0) -> SensorReading:
    """read_sensors + _with_fleet, from the world."""
    v = prom.view(world, dep, t)
    lifecycle = state.lifecycle
    candidate = lifecycle.candidate if lifecycle.phase is LifecyclePhase.CANARY else None
    others = prom.group(v, set(v.by_version) - {candidate}, 0, world)  # a canary never passes for the served
    served = prom.group(v, {dep.pointer.name}, 0, world)
    acceptance = served if served.drafted_tokens else others
    canary = control = None
    if candidate is not None:
        canary = prom.pod_group(prom.group(v, {candidate}, 1, world))
        control = prom.pod_group(prom.group(v, set(v.by_version) - {candidate}, 2, world))
    observation = Observation(
        acceptance_length=acceptance.acceptance_length if acceptance.drafted_tokens else None,
        per_position_acceptance=(acceptance.position0,) if acceptance.position0 is not None else (),
        batch_size=v.batch_size, acceptance_samples=acceptance.drafted_tokens,
        buffer_samples=int(dep.samples_since_launch), promoted_version=dep.pointer.name,
        training=_trainer_outcome(dep, state), canary=canary, control=control,
        ready_pods=tuple(p.name for p in dep.pods),
        pool=pooled(pool, dep.pointer.name),
        recall=_recall_outcome(dep, state),
        traffic=_traffic(dep, state, pool, recall_threshold),
    )
    return SensorReading(observation)


def _traffic(dep: Deployment, state: PolicyState, pool: DraftPool | None,
             recall_threshold: int) -> TrafficSignatures | None:
    """sensors.pooled_drafts' return window: the newest captures' signatures against the pool's."""
    if pool is None or not recall_threshold:
        return None
    window = return_windows(state.lifecycle, capture_objects(dep.buffer), recall_threshold)
    return against_pool(window, pool, dep.pointer.name, pooled(pool, dep.pointer.name)) if window else None


def pooled(pool: DraftPool | None, served_version: str) -> tuple[str, ...]:
    """sensors.pooled_drafts: the pool's other drafts, `initial` included, most recently served first."""
    entries = sorted(pool.entries if pool else (), key=lambda e: (-e.last_served_at, e.version))
    return tuple(e.version for e in entries if e.version != served_version)


def _trainer_outcome(dep: Deployment, state: PolicyState) -> TrainingObservation | None:
    lifecycle = state.lifecycle
    if lifecycle.phase is LifecyclePhase.EVALUATING and lifecycle.candidate is not None and (
            not lifecycle.candidate_recalled):
        job = dep.finished[lifecycle.candidate]
        return TrainingObservation(job.run_id, TrainingStatus.SUCCEEDED, job.eval_length, job.baseline_length)
    run = lifecycle.active_run
    if run is None:
        return None
    if dep.job is not None and dep.job.run_id == run:
        return TrainingObservation(run, TrainingStatus.RUNNING)
    job = dep.finished.get(run)
    if job is None:
        return TrainingObservation(run, TrainingStatus.MISSING)
    status = TrainingStatus.SUCCEEDED if job.eval_length > job.baseline_length else TrainingStatus.NOT_BETTER
    return TrainingObservation(run, status, job.eval_length, job.baseline_length)  # exit 7: not better


def _recall_outcome(dep: Deployment, state: PolicyState) -> RecallObservation | None:
    run = state.lifecycle.recall_run
    if run is None:
        return None
    if dep.job is not None and dep.job.run_id == run:
        return RecallObservation(run, TrainingStatus.RUNNING)
    job = dep.finished.get(run)
    if not isinstance(job, RecallJob):
        return RecallObservation(run, TrainingStatus.MISSING)
    best = min(job.scores, key=lambda v: (-job.scores[v], v), default=None)  # RecallReport.best's order
    return RecallObservation(run, TrainingStatus.SUCCEEDED, best, job.scores[best] if best else None,
                             job.served_length)


class OperatorPolicy:
    """Runs control_pass every tick on the world, with the status carried from pass to pass."""

    def __init__(self, world: World, params: PolicyParams | None = None) -> None:
        self.world, self.params = world, params or operator_params()
        self.dep = Deployment.launched(world.launch)  # pods launch speculating with the launch table
        self.effects = SimEffects(world, self.dep, sample_threshold=self.params.training.sample_threshold,
                                  recall_threshold=self.params.recall.sample_threshold)
        now = datetime.fromtimestamp(0, UTC)
        self.draft = StatusDraft(TideDeploymentStatus(phase=Phase.SERVING), generation=1, now=now)
        self.training_deferred: str | None = None

    def tick(self, t: float) -> None:
        stored = self.draft.status.control_state
        state = PolicyState.from_dict(stored) if stored else PolicyState()
        self.effects.now = t
        self.draft.events.clear()
        self.draft.now = datetime.fromtimestamp(t, UTC)
        self.effects.note_served()
        seen = sense(self.world, self.dep, state, t, self.effects.pool, self.effects.recall_threshold)
        if self.training_deferred is not None:  # the placement bench's fleet verdict (control/fleet.py)
            seen = replace(seen, observation=replace(seen.observation, training_deferred=self.training_deferred))
        control_pass(self.draft, self.params, seen, self.effects, t)

    def before_step(self, i: int) -> None:
        return None
