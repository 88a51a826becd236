"""From raw Prometheus sums to the numbers the policy reads (pure).

Ratios are taken here, not in PromQL, so a group with no drafts or no pods is "no data" (None)
and a deployment's totals are exact sums of its version groups.
vLLM's definitions (vllm/v1/spec_decode/metrics.py):
- acceptance rate = accepted / drafted tokens;
- mean acceptance length = 1 + accepted / drafts (the bonus token included);
- per-position acceptance i = accepted at position i / drafts (position 0's is the per-token a).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tide_operator.adapters.prometheus_adapter_queries import DeploymentKey, GroupKey, Metric, RawGroup
from tide_operator.control.canary import PodGroupMetrics
from tide_operator.control.policy import Observation


@dataclass(frozen=True)
class GroupMetrics:
    """One deployment's pods, or those of one draft version, over the rate window."""

    acceptance_rate: float | None = None
    acceptance_length: float | None = None
    per_position_acceptance: tuple[float, ...] = ()
    generation_throughput: float | None = None  # tokens/s, all pods of the group together
    requests_running: float | None = None  # sum of vllm:num_requests_running
    engines: int = 0  # engines (one per pod unless data-parallel) reporting requests running
    drafted_tokens: int = 0  # behind the acceptance numbers: 0 means no acceptance data

    @property
    def batch_size(self) -> float | None:
        """Running requests per engine: the batch one engine verifies."""
        if self.requests_running is None or self.engines == 0:
            return None
        return self.requests_running / self.engines

    @property
    def throughput_per_engine(self) -> float | None:
        if self.generation_throughput is None or self.engines == 0:
            return None
        return self.generation_throughput / self.engines


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def group_metrics(raw: RawGroup) -> GroupMetrics:
    drafts, draft_tokens = raw.get(Metric.DRAFTS), raw.get(Metric.DRAFT_TOKENS)
    accepted = raw.get(Metric.ACCEPTED_TOKENS)
    per_drafts = _ratio(accepted, drafts)
    per_position = raw.per_position() if drafts else ()
    engines = raw.get(Metric.ENGINES)
    return GroupMetrics(
        acceptance_rate=_ratio(accepted, draft_tokens),
        acceptance_length=None if per_drafts is None else 1.0 + per_drafts,
        per_position_acceptance=tuple(n / drafts for n in per_position) if drafts else (),
        generation_throughput=raw.get(Metric.GENERATION_RATE),
        requests_running=raw.get(Metric.REQUESTS_RUNNING),
        engines=round(engines) if engines else 0,
        drafted_tokens=round(draft_tokens) if draft_tokens and accepted is not None else 0,
    )


@dataclass(frozen=True)
class DeploymentMetrics:
    """A TideDeployment's live numbers: all pods, and per served draft version."""

    key: DeploymentKey
    raw_by_version: Mapping[str | None, RawGroup] = field(default_factory=dict)  # None: pods without a draft

    @property
    def total(self) -> GroupMetrics:
        return self.pod_group_metrics(set(self.raw_by_version))

    @property
    def by_version(self) -> dict[str | None, GroupMetrics]:
        return {v: group_metrics(raw) for v, raw in self.raw_by_version.items()}

    def pod_group_metrics(self, versions: set[str | None]) -> GroupMetrics:
        """The pods serving any of `versions`, summed before any ratio is taken."""
        raw = RawGroup()
        for version, group in self.raw_by_version.items():
            if version in versions:
                raw = raw.merged(group)
        return group_metrics(raw)

    def pod_group(self, versions: set[str | None]) -> PodGroupMetrics:
        """Canary-analysis view of the pods serving any of `versions` (throughput per engine, position 0's a)."""
        merged = self.pod_group_metrics(versions)
        length = merged.acceptance_length
        if length is None and merged.engines and None in versions:
            length = 1.0  # pods serving without speculation: one token per step
        # Position 0's acceptance is a whatever g the pods ran: the canary analysis keeps it per measurement.
        first = merged.per_position_acceptance[0] if merged.per_position_acceptance else None
        return PodGroupMetrics(acceptance_length=length, generation_throughput=merged.throughput_per_engine,
                               per_token_acceptance=first)


def deployment_metrics(groups: Mapping[GroupKey, RawGroup]) -> dict[DeploymentKey, DeploymentMetrics]:
    """Regroup (deployment, version) answers per deployment."""
    by_deployment: dict[DeploymentKey, dict[str | None, RawGroup]] = {}
    for (deployment, version), raw in groups.items():
        by_deployment.setdefault(deployment, {})[version] = raw
    return {key: DeploymentMetrics(key, raw) for key, raw in by_deployment.items()}


def observation(
    metrics: DeploymentMetrics | None, *, served_version: str | None = None, candidate_version: str | None = None
) -> Observation:
    """The Prometheus part of the policy's Observation (the caller adds S3 and Job fields).

    Acceptance comes from the served draft's pods when `served_version` has any (so a canary does not
    blur it), else from all pods but the candidate's: a canary speculating while the fleet does not
    (control/canary_speculation.py) must not pass for the served draft. With a candidate, canary = its
    pods and control = all others.
    """
    if metrics is None:
        return Observation()  # no series at all: insufficient data, the policy holds its state
    total = metrics.total
    served = metrics.pod_group_metrics({served_version}) if served_version is not None else None
    others = total if candidate_version is None else metrics.pod_group_metrics(
        {v for v in metrics.raw_by_version if v != candidate_version})
    acceptance = served if served is not None and served.drafted_tokens else others
    canary = control = None
    if candidate_version is not None:
        canary = metrics.pod_group({candidate_version})
        control = metrics.pod_group({v for v in metrics.by_version if v != candidate_version})
    return Observation(
        acceptance_rate=acceptance.acceptance_rate,
        acceptance_length=acceptance.acceptance_length,
        per_position_acceptance=acceptance.per_position_acceptance,
        batch_size=total.batch_size,
        generation_throughput=total.generation_throughput,
        acceptance_samples=acceptance.drafted_tokens,
        by_version={
            v: PodGroupMetrics(g.acceptance_length, g.throughput_per_engine)
            for v, g in metrics.by_version.items() if v is not None
        },
        canary=canary,
        control=control,
    )
