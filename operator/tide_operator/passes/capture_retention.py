"""Retention on its own cadence: claims of running trainers, and the prune that skips only them.

``enforce_retention`` runs from its own Kopf timer (handlers.py, operator config
``capturePruneIntervalSeconds``), so captures are pruned while Prometheus is down and while a
trainer runs. ``claim_shards`` runs just before a trainer Job is created (``claim_for_evaluation``
before a recall evaluation Job): it writes ``claims/<run id>.json`` listing the shards that run reads
and returns the Job's deadline.
The decisions are pure (control/retention.py); this module only reads and writes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tide_contracts.registry import CaptureObject, DraftRegistry, PointerConflict, RegistryError
from tide_operator.adapters.cluster import Cluster
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.units import duration_seconds
from tide_operator.config import OperatorConfig
from tide_operator.control.lifecycle import run_number
from tide_operator.control.retention import (
    Claim,
    claim_window,
    claims_to_release,
    live_claims,
    measured_samples_per_second,
    protected_keys,
    training_timeout_s,
)
from tide_operator.control.spec_params import policy_params
from tide_operator.manifests import labels, names
from tide_operator.manifests.ownership import conflict
from tide_operator.passes.capture_buffer import PRUNE_REASON, capture_limits, prune_capture_buffer
from tide_operator.passes.serving_status import EventNote

log = logging.getLogger(__name__)
CLAIMS_RELEASED_REASON = "CaptureClaimsReleased"
RUNS_CONSULTED = 3  # reports read for the trainer's throughput (one GET each, at a launch only)


def parse_claims(bodies: Sequence[dict[str, Any]]) -> list[Claim]:
    """Claims from their stored bodies; a malformed one protects nothing (retention wins)."""
    claims = []
    for body in bodies:
        try:
            keys = frozenset(str(s["key"]) for s in body["shards"])
            claims.append(Claim(str(body["run_id"]), keys, float(body["created_at"]), float(body["expires_at"])))
        except (KeyError, TypeError, ValueError):
            continue
    return claims


def running_runs(name: str, namespace: str, claims: Sequence[Claim], cluster: Cluster) -> set[str]:
    """Claimed runs whose trainer Job, or recall evaluation Job, exists, is ours by name, and has not finished."""
    if not claims:
        return set()
    selector = ",".join(f"{k}={v}" for k, v in labels.selector_labels(name, labels.COMPONENT_TRAINER).items())
    active = {j["metadata"]["name"] for j in cluster.jobs(namespace, selector) if _job_running(j)}
    return {c.run_id for c in claims if not active.isdisjoint(
        (names.trainer_job_name(name, c.run_id), names.evaluation_job_name(name, c.run_id)))}


def _job_running(job: dict[str, Any]) -> bool:
    if job["metadata"].get("deletionTimestamp"):
        return False
    status = job.get("status") or {}
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in status.get("conditions") or [])
    return not (finished or status.get("succeeded") or status.get("failed"))


def enforce_retention(name: str, namespace: str, spec: TideDeploymentSpec, registry: DraftRegistry,
                      cluster: Cluster, config: OperatorConfig, now: datetime) -> list[EventNote]:
    """One prune: release spent claims, then delete what is past retention or a cap and unclaimed."""
    now_s = now.timestamp()
    captures = registry.list_captures()
    claims = parse_claims(registry.list_claims())
    running = running_runs(name, namespace, claims, cluster)
    notes = _release(registry, claims, running, now_s)
    capture = policy_params(spec, observation_window_s=config.prometheus_window_seconds).capture
    live = live_claims(claims, running, now_s)
    kept = protected_keys(captures, live, capture.retention_s, config.capture_prune_interval_seconds, now_s)
    pruned = prune_capture_buffer(registry, captures, capture, kept, now)
    if pruned is not None:
        notes.append(EventNote("Normal", PRUNE_REASON, pruned.message(capture_limits(capture)),
                               action="PruneCaptures"))
    return notes


def _release(registry: DraftRegistry, claims: Sequence[Claim], running: set[str], now_s: float) -> list[EventNote]:
    spent = claims_to_release(claims, running, now_s)
    for run_id in spent:
        registry.release_claim(run_id)
    if not spent:
        return []
    return [EventNote("Normal", CLAIMS_RELEASED_REASON,
                      f"released the capture claims of runs {', '.join(spent)} (run ended or past its deadline)")]


def claim_shards(registry: DraftRegistry, spec: TideDeploymentSpec, config: OperatorConfig, run_id: str,
                 now_s: float, captured_since: float | None = None) -> int:
    """Write run ``run_id``'s claim on the newest window of shards; returns the Job's deadline (s).

    ``captured_since`` (the policy's LaunchTraining: when the current shift began) starts the window
    there, topped up to sampleThreshold samples (control/retention.claim_window). It only filters the
    listing: the claim's keys come from it and the Job's arguments do not change.
    """
    params = policy_params(spec, observation_window_s=config.prometheus_window_seconds)
    window = claim_window(registry.list_captures(), config.trainer.window_shards, params.capture.retention_s, now_s,
                          since=captured_since, min_samples=params.training.sample_threshold)
    timeout = spec.control.training.timeout
    deadline = round(training_timeout_s(duration_seconds(timeout) if timeout else None,
                                        sum(c.samples for c in window), _throughput(registry, config)))
    return _put_claim(registry, run_id, window, now_s, deadline)


def claim_for_evaluation(registry: DraftRegistry, spec: TideDeploymentSpec, config: OperatorConfig, run_id: str,
                         now_s: float, captured_since: float | None, deadline_s: int) -> int:
    """The recall evaluation's claim: the shards since the shift, topped up only to recallSampleThreshold (the
    samples it was launched on; older shards are the traffic before the shift). It expires with the Job's
    ``deadline_s`` (its activeDeadlineSeconds), so the claim never outlives the Job nor ends before it.
    Returns the deadline to give the Job (a retried launch: the claim's own)."""
    params = policy_params(spec, observation_window_s=config.prometheus_window_seconds)
    window = claim_window(registry.list_captures(), config.trainer.window_shards, params.capture.retention_s, now_s,
                          since=captured_since, min_samples=params.recall.sample_threshold)
    return _put_claim(registry, run_id, window, now_s, deadline_s)


def _put_claim(registry: DraftRegistry, run_id: str, window: list[CaptureObject], now_s: float,
               deadline: int) -> int:
    try:
        registry.put_claim(run_id, window, created_at=now_s, expires_at=now_s + deadline)
    except PointerConflict:  # a retried launch: the claim (and its deadline) already stand
        existing = [c for c in parse_claims(registry.list_claims()) if c.run_id == run_id]
        if existing:
            return round(existing[0].timeout_s)
    return deadline


def _throughput(registry: DraftRegistry, config: OperatorConfig) -> float:
    """Samples per second of the newest run with a report, else the configured assumption."""
    try:
        for run_id in _newest_first(registry.list_candidates())[:RUNS_CONSULTED]:
            measured = measured_samples_per_second(registry.candidate_report(run_id))
            if measured is not None:
                return measured
    except RegistryError as e:  # an unreadable report prices nothing: fall back to the assumption
        log.info("no measured trainer throughput: %s", e)
    return config.trainer.samples_per_second


def _newest_first(run_ids: Sequence[str]) -> list[str]:
    """Operator runs are <hash>-r1, ..., <hash>-r10 (or r1, ...): by number, not by name; others (a seed) last."""
    def order(run_id: str) -> tuple[int, str]:
        number = run_number(run_id)
        return (-number if number is not None else 1, run_id)
    return sorted(run_ids, key=order)



def stop_capture_writers(name: str, namespace: str, owner_uid: str, cluster: Cluster,
                         group_deployments: tuple[str, ...] = ()) -> bool:
    """Scale our serving Deployments (the one, the lent one, each serving group's) to zero; True while
    their pods still run (they may still write captures).

    Deleting the captures before the pods are gone would leave the shards they flush on the way out.
    """
    for serving in (names.serving_name(name), names.lent_serving_name(name), *group_deployments):
        live = cluster.deployment(namespace, serving)
        if live is not None and conflict(owner_uid, "Deployment", live) is None \
                and (live.get("spec") or {}).get("replicas") != 0:
            cluster.apps.patch_namespaced_deployment(serving, namespace, {"spec": {"replicas": 0}})
    pods = cluster.pods(namespace, labels.serving_selector(name))
    return any(not _terminated(p) for p in pods)


def _terminated(pod: dict[str, Any]) -> bool:
    """A terminated pod no longer writes: only running or pending pods are waited for."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
