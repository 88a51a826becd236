"""Prometheus' view of one deployment: counters summed over the rate window, as of the last scrape, with noise.

The same arithmetic as prometheus_adapter_metrics: length = 1 + accepted / drafts, position 0's
acceptance = accepted at position 0 / drafts (also in the canary and control groups, as pod_group
gives them), throughput per engine, running requests per engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.policy_sim.generator import STEP_S
from bench.policy_sim.world import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    GENERATED,
    POD_STEPS,
    POSITION0,
    RATE_WINDOW_S,
    SCRAPE_S,
    Deployment,
    World,
)
from tide_operator.control.canary import PodGroupMetrics


@dataclass(frozen=True)
class GroupView:
    acceptance_length: float | None
    position0: float | None
    drafted_tokens: int
    throughput_per_engine: float | None


@dataclass(frozen=True)
class View:
    scrape: int
    batch_size: float | None
    by_version: dict[str, np.ndarray]


def view(world: World, dep: Deployment, t: float) -> View:
    """Counters of each version over (last scrape - window, last scrape]."""
    scrape = int(t // SCRAPE_S)
    seen_at = scrape * SCRAPE_S
    last = min(int(seen_at // STEP_S), len(dep.rows))
    first = max(0, last - int(RATE_WINDOW_S // STEP_S))
    sums: dict[str, np.ndarray] = {}
    for row in dep.rows[first:last]:
        for version, counters in row.items():
            sums[version] = sums.get(version, 0) + counters
    batch = None
    if last > 0:
        batch = world.batches[last - 1] * max(0.05, 1 + world.noise.batch[scrape])
    return View(scrape, batch, sums)


def group(v: View, versions: set[str], noise_column: int, world: World) -> GroupView:
    """The pods serving any of ``versions``, summed before any ratio (noise: paired per scrape and group)."""
    total = sum((c for name, c in v.by_version.items() if name in versions), np.zeros(6))
    eps = world.noise.acceptance[v.scrape, noise_column]
    throughput = None
    if total[POD_STEPS]:
        tput_eps = world.noise.throughput[v.scrape, noise_column]
        throughput = total[GENERATED] / (total[POD_STEPS] * STEP_S) * (1 + tput_eps)
    if not total[DRAFTS]:
        return GroupView(None, None, 0, throughput)  # pods with a draft but not speculating: no data
    length = 1 + total[ACCEPTED] / total[DRAFTS] * (1 + eps)
    position0 = min(1.0, total[POSITION0] / total[DRAFTS] * (1 + eps))
    return GroupView(float(length), float(position0), int(total[DRAFT_TOKENS]), throughput)


def pod_group(g: GroupView) -> PodGroupMetrics:
    return PodGroupMetrics(g.acceptance_length, g.throughput_per_engine, per_token_acceptance=g.position0)
