"""Capture retention that holds (pure): which shards a prune deletes, which claims still hold, trainer deadlines.

A running trainer claims the shards it reads (a claim object listing their keys, written before its
Job is created); pruning skips only shards a live claim names. A claim is live while its run's Job
runs and its deadline (the Job's ``activeDeadlineSeconds``) has not passed, and it never keeps a
shard past ``retention + timeout - prune interval``, so with pruning every ``interval`` no capture
outlives ``retention + max(interval, timeout)`` (docs/security.md, "Retention").
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tide_contracts.registry import CaptureLimits, CaptureObject, captures_to_prune

MIN_DEFAULT_TIMEOUT_S = 600.0  # 10m: a run that small still needs to start a pod and read its shards
MAX_DEFAULT_TIMEOUT_S = 86400.0  # 24h: a deadline nobody notices is no deadline
TIMEOUT_SAFETY_FACTOR = 3.0  # the default deadline is three times the expected run time


@dataclass(frozen=True)
class Claim:
    """A trainer run's hold on the shards it reads (``<prefix>/claims/<run id>.json``)."""

    run_id: str
    keys: frozenset[str]
    created_at: float  # epoch seconds, when the claim was written (just before the Job)
    expires_at: float  # created_at + the Job's activeDeadlineSeconds

    @property
    def timeout_s(self) -> float:
        return self.expires_at - self.created_at


# A claim is written before its Job is created, and the Jobs a prune sees come from a watch cache that can
# lag: a claim this young holds even while its Job is not seen yet, or a prune in that gap releases it and
# deletes the shards its run is about to read (seen under load: the trainer's NoSuchKey, exit 6).
CLAIM_GRACE_S = 120.0


def live_claims(claims: Sequence[Claim], running_runs: Collection[str], now: float) -> list[Claim]:
    """Claims that still hold: their run's Job runs (or the claim is too young for its Job to be seen) and
    their deadline has not passed."""
    return [c for c in claims
            if now < c.expires_at and (c.run_id in running_runs or now - c.created_at < CLAIM_GRACE_S)]


def claims_to_release(claims: Sequence[Claim], running_runs: Collection[str], now: float) -> list[str]:
    """Run ids whose claim is spent: the run ended (succeeded, failed, deleted) or its deadline passed."""
    held = {c.run_id for c in live_claims(claims, running_runs, now)}
    return [c.run_id for c in claims if c.run_id not in held]


def protected_keys(captures: Sequence[CaptureObject], claims: Sequence[Claim], retention_s: float,
                   interval_s: float, now: float) -> frozenset[str]:
    """Keys a live claim keeps, except those already ``retention + timeout - interval`` old.

    The cap keeps the stated bound: the next prune (at most ``interval`` later) deletes the shard
    before it is ``retention + timeout`` old, even if its run still reads.
    """
    kept: set[str] = set()
    for capture in captures:
        age = now - capture.last_modified
        if any(capture.key in c.keys and age < retention_s + c.timeout_s - interval_s for c in claims):
            kept.add(capture.key)
    return frozenset(kept)


def pruning_plan(captures: Sequence[CaptureObject], limits: CaptureLimits,
                 kept: Collection[str]) -> tuple[list[CaptureObject], CaptureLimits]:
    """The unclaimed listing and caps that make the registry's prune skip ``kept`` shards.

    Claimed shards still occupy the buffer: the caps shrink by what they hold, so the unclaimed
    oldest go first exactly as if the claimed ones were skipped in place.
    """
    held = [c for c in captures if c.key in kept]
    free = [c for c in captures if c.key not in kept]
    caps = CaptureLimits(max_samples=max(0, limits.max_samples - sum(c.samples for c in held)),
                         max_bytes=max(0, limits.max_bytes - sum(c.size for c in held)),
                         retention_s=limits.retention_s)
    return free, caps


def prunable(captures: Sequence[CaptureObject], limits: CaptureLimits, kept: Collection[str],
             now: float) -> list[CaptureObject]:
    """What a prune deletes now: oldest first past retention or a cap, never a kept shard."""
    free, caps = pruning_plan(captures, limits, kept)
    doomed = set(captures_to_prune(free, caps, now))
    return sorted((c for c in free if c.key in doomed), key=lambda c: (c.last_modified, c.key))


def claim_window(captures: Sequence[CaptureObject], window_shards: int, retention_s: float, now: float,
                 since: float | None = None, min_samples: int = 0) -> list[CaptureObject]:
    """The shards a new run claims and reads: the newest ``window_shards`` not yet past retention.

    Shards past retention are left out: they are due for deletion, so no run depends on them.
    ``since`` (when the current workload shift began) leaves out what was captured before it: that is
    the traffic before the shift, and a run trained on the mix learns the new traffic by halves. If the
    shards since then hold fewer than ``min_samples`` (sampleThreshold: a clock skew between S3 and the
    operator, a cap that pruned them), the newest older shards top the window up to it.
    """
    fresh = [c for c in captures if now - c.last_modified <= retention_s]
    ordered = sorted(fresh, key=lambda c: (c.last_modified, c.key))
    if since is not None:
        first = next((i for i, c in enumerate(ordered) if c.last_modified >= since), len(ordered))
        held = sum(c.samples for c in ordered[first:])
        while first > 0 and held < min_samples:
            first -= 1
            held += ordered[first].samples
        ordered = ordered[first:]
    return ordered[-window_shards:] if window_shards > 0 else []


def default_training_timeout_s(samples: int, samples_per_second: float) -> float:
    """Three times the expected run time, bounded to [10m, 24h]."""
    if samples_per_second <= 0:
        return MAX_DEFAULT_TIMEOUT_S
    expected = samples / samples_per_second
    return min(MAX_DEFAULT_TIMEOUT_S, max(MIN_DEFAULT_TIMEOUT_S, TIMEOUT_SAFETY_FACTOR * expected))


def training_timeout_s(spec_timeout_s: float | None, samples: int, samples_per_second: float) -> float:
    """``control.training.timeout`` when set (taken as written), else the bounded default."""
    if spec_timeout_s is not None:
        return spec_timeout_s
    return default_training_timeout_s(samples, samples_per_second)


def measured_samples_per_second(report: dict[str, object] | None) -> float | None:
    """Training throughput of a finished run from its evaluation report (eval.json), if it says.

    Requests trained per second of training (the report's ``samples.train_requests`` and
    ``training.seconds``): a capture sample is one request, so this prices the next run's window.
    """
    if not report:
        return None
    samples, training = report.get("samples"), report.get("training")
    if not isinstance(samples, dict) or not isinstance(training, dict):
        return None
    requests, seconds = samples.get("train_requests"), training.get("seconds")
    if not isinstance(requests, int | float) or not isinstance(seconds, int | float) or seconds <= 0:
        return None
    return float(requests) / float(seconds) if requests > 0 else None
