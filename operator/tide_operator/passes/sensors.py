"""What a control pass observes: Prometheus (acceptance, load), S3 (pointer, buffer), trainer Jobs.

Composes the policy's Observation. Prometheus or S3 being unreachable is a reading with an error
(the pass then holds its decisions and reports Degraded), never a made-up number.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from tide_contracts.draft_pool import for_target
from tide_contracts.registry import CaptureObject, DraftRegistry, RegistryError
from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.prometheus_adapter import PrometheusAdapter, PrometheusUnavailable
from tide_operator.adapters.prometheus_adapter_metrics import observation
from tide_operator.adapters.prometheus_adapter_queries import DeploymentKey
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.conditions import Reason
from tide_operator.control.draft_return import TrafficSignatures, against_pool, return_windows
from tide_operator.control.lifecycle import (
    LifecycleState,
    RecallObservation,
    TrainingObservation,
    TrainingStatus,
    run_id_for,
    run_number,
)
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.policy import PolicyState
from tide_operator.manifests import labels, names
from tide_operator.manifests.trainer import CONTAINER_NAME as TRAINER_CONTAINER
from tide_operator.passes.control_loop import SensorReading
from tide_operator.passes.pod_convergence import LAUNCH_DRAFT_VERSION
from tide_operator.passes.storage_errors import STORAGE_ERRORS

INITIAL_VERSION = LAUNCH_DRAFT_VERSION  # what the serving plugin reports for the draft a pod was launched with
NOT_BETTER_EXIT_CODE = 7  # trainer contract (docs/contracts/trainer-cli.md): ExitCode.NOT_BETTER
NO_GPU_EXIT_CODE = 8  # trainer contract: ExitCode.NO_GPU, the Job asked for GPUs and torch saw none
JOB_NAME_LABEL = "job-name"  # set by the Job controller on the pods it creates
log = logging.getLogger(__name__)


def read_sensors(name: str, namespace: str, spec: TideDeploymentSpec, state: PolicyState,
                 prometheus: PrometheusAdapter, registry: DraftRegistry, cluster: Cluster) -> SensorReading:
    try:
        metrics = prometheus.deployment(DeploymentKey(namespace, name))
    except PrometheusUnavailable as e:
        return SensorReading(None, str(e))
    try:
        served = served_version(registry, spec)
        launched_at = last_launch_time(name, namespace, state, cluster)
        captures = tuple(registry.list_captures())
        buffer_samples = sum(c.samples for c in captures if c.last_modified > launched_at)
        training = trainer_outcome(name, namespace, state, cluster, registry)
        pool, traffic = pooled_drafts(registry, spec, state, served, buffer_samples, captures)
        recall = recall_outcome(name, namespace, state, cluster, registry, launch_draft=bool(spec.draft.initial))
    except STORAGE_ERRORS as e:
        return SensorReading(None, f"S3 {spec.storage.s3.bucket}: {e}", error_reason=Reason.STORAGE_UNREACHABLE)
    lifecycle = state.lifecycle
    candidate = lifecycle.candidate if lifecycle.phase is LifecyclePhase.CANARY else None
    seen = observation(metrics, served_version=served, candidate_version=candidate)
    return SensorReading(replace(seen, promoted_version=served, buffer_samples=buffer_samples,
                                 buffer_since=launched_at, training=training,
                                 pool=pool, recall=recall, traffic=traffic), captures=captures)


def served_version(registry: DraftRegistry, spec: TideDeploymentSpec) -> str | None:
    """The promoted version for this target revision, else the launch draft, else none."""
    pointer, _ = registry.promoted()
    if pointer is not None and pointer.target_revision == spec.target.revision:
        return pointer.version
    return INITIAL_VERSION if spec.draft.initial else None


def last_launch_time(name: str, namespace: str, state: PolicyState, cluster: Cluster) -> float:
    """When the latest training run's Job was created (epoch s); 0 before the first run.

    The policy counts the buffer "since the last training launch" (it resets its baseline to 0
    when it launches), so samples the previous run already saw are not counted again. A Job that
    is gone (cancelled) gives 0: every sample in the buffer counts.
    """
    counter = state.lifecycle.run_counter
    if counter < 1:
        return 0.0
    run = state.lifecycle.last_run or run_id_for(counter)  # state from before last_run: the old "r<n>" ids
    jobs = cluster.jobs(namespace, f"{labels.TRAINING_RUN_LABEL}={run}")
    job = next((j for j in jobs if j["metadata"]["name"] == names.trainer_job_name(name, run)), None)
    if job is None and any(j["metadata"]["name"] == names.evaluation_job_name(name, run) for j in jobs):
        # The latest run was a recall evaluation, which trains on nothing: the buffer still counts from the
        # training launch before it (the lifecycle's baseline was taken against that one).
        job = _training_job_before(name, namespace, run, cluster)
    created = (job or {}).get("metadata", {}).get("creationTimestamp")
    if not created:
        return 0.0
    return datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()


def _training_job_before(name: str, namespace: str, run: str, cluster: Cluster) -> dict[str, Any] | None:
    """Our newest trainer Job numbered below run ``run`` (None: none left, every sample counts)."""
    ceiling = run_number(run)
    selector = f"{labels.DEPLOYMENT_LABEL}={name},{labels.JOB_KIND_LABEL}={labels.JOB_KIND_TRAINING}"
    numbered = [(number, j) for j in cluster.jobs(namespace, selector)
                if (own := (j["metadata"].get("labels") or {}).get(labels.TRAINING_RUN_LABEL)) is not None
                and j["metadata"]["name"] == names.trainer_job_name(name, own)
                and (number := run_number(own)) is not None and (ceiling is None or number < ceiling)]
    return max(numbered, key=lambda pair: pair[0])[1] if numbered else None


def trainer_outcome(name: str, namespace: str, state: PolicyState, cluster: Cluster,
                    registry: DraftRegistry) -> TrainingObservation | None:
    lifecycle = state.lifecycle
    if lifecycle.phase is LifecyclePhase.EVALUATING and lifecycle.candidate is not None:
        # The evaluation weighs the candidate against the report's own baseline (the served
        # draft on the same held-out requests), which only the candidate's manifest carries. A recalled
        # pooled vN has no candidate manifest: its numbers are the recall report's, kept in the state.
        return None if lifecycle.candidate_recalled else _evaluated(lifecycle.candidate, registry)
    run = lifecycle.active_run
    if run is None:
        return None
    selector = f"{labels.TRAINING_RUN_LABEL}={run}"
    job_name = names.trainer_job_name(name, run)
    # Another TideDeployment in the namespace may have a run of the same id: match the Job's name.
    job = next((j for j in cluster.jobs(namespace, selector) if j["metadata"]["name"] == job_name), None)
    if job is None:
        return TrainingObservation(run, TrainingStatus.MISSING)
    status = job.get("status") or {}
    if status.get("failed") or _deadline_exceeded(status):
        return _failed(run, job_name, status, namespace, cluster)
    if not status.get("succeeded"):
        return TrainingObservation(run, TrainingStatus.RUNNING)
    return _evaluated(run, registry)


def _failed(run: str, job_name: str, status: dict[str, Any], namespace: str, cluster: Cluster) -> TrainingObservation:
    if _deadline_exceeded(status):  # the Job controller stopped a hung trainer (activeDeadlineSeconds)
        return TrainingObservation(run, TrainingStatus.DEADLINE_EXCEEDED)
    pods = [p for p in cluster.pods(namespace, f"{labels.TRAINING_RUN_LABEL}={run}")
            if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == job_name]
    return failed_run(run, pods)


def _deadline_exceeded(status: dict[str, Any]) -> bool:
    return any(c.get("type") == "Failed" and c.get("status") == "True" and c.get("reason") == "DeadlineExceeded"
               for c in status.get("conditions") or [])


def failed_run(run: str, pods: list[dict[str, Any]]) -> TrainingObservation:
    """A failed trainer Job's outcome from its pod: exit 7 (not_better) is a decision, not a failure.

    The exit code comes from the trainer container's terminated state; the one-line JSON summary
    the trainer leaves in its termination log (terminated.message) adds the numbers, and stands in
    for the code where a runtime reports none.
    """
    terminated = next((t for p in pods if (t := _trainer_terminated(p)) is not None), None)
    if terminated is None:
        return TrainingObservation(run, TrainingStatus.FAILED)
    summary = _summary(terminated.get("message"))
    code = terminated.get("exitCode", summary.get("exit_code"))
    if code == NO_GPU_EXIT_CODE:
        return TrainingObservation(run, TrainingStatus.NO_GPU)
    if code != NOT_BETTER_EXIT_CODE:
        return TrainingObservation(run, TrainingStatus.FAILED)
    return TrainingObservation(run, TrainingStatus.NOT_BETTER,
                               candidate_acceptance_length=_number(summary.get("candidate_acceptance_length")),
                               served_acceptance_length=_number(summary.get("baseline_acceptance_length")))


def _trainer_terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == TRAINER_CONTAINER:
            terminated = (container.get("state") or {}).get("terminated")
            return dict(terminated) if terminated else None
    return None


def _summary(message: object) -> dict[str, Any]:
    try:
        summary = json.loads(str(message)) if message else {}
    except ValueError:  # a truncated or foreign message: the exit code still decides
        return {}
    return summary if isinstance(summary, dict) else {}


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _evaluated(run: str, registry: DraftRegistry) -> TrainingObservation:
    manifest = registry.candidate_manifest(run)
    decision: dict[str, Any] = manifest.eval
    return TrainingObservation(run, TrainingStatus.SUCCEEDED,
                               candidate_acceptance_length=decision.get("candidate_acceptance_length"),
                               served_acceptance_length=decision.get("baseline_acceptance_length"))


# ---- the draft pool's recall (issue 16) ------------------------------------------------------------
def pooled_drafts(registry: DraftRegistry, spec: TideDeploymentSpec, state: PolicyState, served: str | None,
                  buffer_samples: int, captures: Sequence[CaptureObject] = (),
                  ) -> tuple[tuple[str, ...], TrafficSignatures | None]:
    """The pool's other drafts of this target, most recently served first, and the newest captures' signature
    against theirs and the served draft's (draft_return.py). pool.json is read only when a recall could be
    due (lifecycle_recall.recall_due but for the pool itself) or a return could show, not every pass.

    ``initial`` (the launch draft) only while the spec names one: the evaluation Job and the canary load it
    from there. Never the served draft.
    """
    pool = spec.control.draft_pool
    offered = pool.recall and spec.control.draft_pin is None
    window = return_windows(state.lifecycle, captures, pool.recall_sample_threshold) if offered else None
    if window is None and not _recall_may_be_due(spec, state.lifecycle, buffer_samples):
        return (), None
    current, _ = registry.pool()
    index = for_target(current, spec.target.revision, None)
    ordered = sorted(index.entries, key=lambda e: (-e.last_served_at, e.version))
    launch = () if spec.draft.initial else (INITIAL_VERSION,)
    others = tuple(e.version for e in ordered if e.version not in (served, *launch))
    return others, against_pool(window, index, served, others) if window is not None else None


def _recall_may_be_due(spec: TideDeploymentSpec, lifecycle: LifecycleState, buffer_samples: int) -> bool:
    """Collecting after a shift the pool was not tried for, with the samples a recall scores on."""
    pool = spec.control.draft_pool
    return (pool.recall and spec.control.draft_pin is None and lifecycle.phase is LifecyclePhase.COLLECTING
            and lifecycle.shift_at is not None and lifecycle.recalled_for_shift != lifecycle.shift_at
            and lifecycle.retrain_at is None
            and buffer_samples - lifecycle.buffer_baseline >= pool.recall_sample_threshold)


def recall_outcome(name: str, namespace: str, state: PolicyState, cluster: Cluster,
                   registry: DraftRegistry, *, launch_draft: bool = True) -> RecallObservation | None:
    """While Recalling: the evaluation Job's status as a trainer Job's is read, and once it succeeded its
    report's best pooled draft against the served one (``initial`` only while the spec names a launch
    draft: a canary and the pods load it from spec.draft.initial)."""
    lifecycle = state.lifecycle
    run = lifecycle.recall_run
    if lifecycle.phase is not LifecyclePhase.RECALLING or run is None:
        return None
    job_name = names.evaluation_job_name(name, run)
    # Another TideDeployment in the namespace may have a run of the same id: match the Job's name.
    job = next((j for j in cluster.jobs(namespace, f"{labels.TRAINING_RUN_LABEL}={run}")
                if j["metadata"]["name"] == job_name), None)
    if job is None:
        return RecallObservation(run, TrainingStatus.MISSING)
    status = job.get("status") or {}
    if _deadline_exceeded(status):
        return RecallObservation(run, TrainingStatus.DEADLINE_EXCEEDED)
    if status.get("failed"):
        return RecallObservation(run, TrainingStatus.FAILED)
    if not status.get("succeeded"):
        return RecallObservation(run, TrainingStatus.RUNNING)
    return _recall_report(run, job_name, registry, launch_draft)


def _recall_report(run: str, job_name: str, registry: DraftRegistry, launch_draft: bool) -> RecallObservation:
    """The report's best pooled vN; a Job that succeeded without a readable report of its run is a failure."""
    try:
        report = registry.recall_report(run)
    except RegistryError as e:
        if not isinstance(e.__cause__, ValidationError):
            raise  # S3 unreachable: the pass holds (Degraded) and reads it again
        log.warning("recall evaluation Job %s succeeded, but its report does not parse: %s", job_name, e)
        return RecallObservation(run, TrainingStatus.FAILED)
    if report is None or report.run_id != run:
        log.warning("recall evaluation Job %s succeeded, but candidates/%s/recall.json %s: counted as failed",
                    job_name, run, "is missing" if report is None else f"is run {report.run_id}'s")
        return RecallObservation(run, TrainingStatus.FAILED)
    scores = [s for s in report.scores if launch_draft or s.version != INITIAL_VERSION]
    best = min(scores, key=lambda s: (-s.acceptance_length, s.version), default=None)
    return RecallObservation(run, TrainingStatus.SUCCEEDED, best_version=best.version if best else None,
                             best_acceptance_length=best.acceptance_length if best else None,
                             served_acceptance_length=report.served_acceptance_length)
