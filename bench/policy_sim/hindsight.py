"""The hindsight bound: an upper bound on any policy's throughput in a scenario, knowing the whole trace.

A dynamic programme over the decision points every policy acts at (the ticks, every 30 s): at each
tick it may launch, for every domain at once, a run trained only on that domain (share 1) from the
best draft reachable for it so far, knowing the run's regression (hindsight); a finished run can be
served from that moment, any draft can be switched in at any step for free, g is the best of 0..3
at every step, and capture and training cost nothing. Every action any policy has (g per step or per
band, on/off, capture, launch, cancel, canary, promote, roll back, deploy) yields drafts whose live
acceptance on each domain is at most this programme's, because a trained draft's acceptance on a
domain grows with its parent's and, net of regression, is at most the parent's or the pure-domain
run's (world.World.trained). It is a relaxation: achievable by no single plan, hence loose.
Cost: O(ticks x domains) for the programme plus O(steps x 4) for the per-step g.
"""

from __future__ import annotations

import math

import numpy as np

from bench.policy_sim.generator import STEP_S, TICK_S
from bench.policy_sim.world import G, World, true_speedup


def reachable_acceptance(world: World) -> np.ndarray:
    """U[i, d]: the best live acceptance on domain d any draft can have at step i."""
    scenario, params = world.scenario, world.params
    steps, domains = len(world.times), len(scenario.ceilings)
    seen = np.cumsum(np.array(world.weights) > 0, axis=0) > 0  # the domain has had traffic by step i
    ticks = math.ceil(scenario.duration_s / TICK_S)
    ready_after = math.ceil(params.training_s / STEP_S)  # a Job ends at the first step past its duration
    best = np.zeros((steps + 1, domains))
    best[0] = scenario.launch
    arrivals = np.zeros((steps + 1 + ready_after + int(TICK_S / STEP_S), domains))
    for k in range(ticks):
        i = int(k * TICK_S / STEP_S)
        if i >= steps:
            break
        start = best[i].copy()  # what is reachable when the run launches
        best[i] = start
        for d in range(domains):
            if not seen[i, d]:
                continue
            gained = start[d] + params.training_gain * (scenario.ceilings[d] - start[d])
            live = min(gained, scenario.ceilings[d]) - world.noise.regression[k]
            arrive = i + ready_after - 1
            arrivals[arrive, d] = max(arrivals[arrive, d], live)
        nxt = min(steps, int((k + 1) * TICK_S / STEP_S))
        for j in range(i + 1, nxt + 1):
            best[j] = np.maximum(best[j - 1], arrivals[j - 1])
    return np.maximum.accumulate(np.maximum(best[:steps], scenario.launch), axis=0)


def bound_series(world: World) -> list[float]:
    """The bound's throughput ratio at every step."""
    upper = reachable_acceptance(world)
    out = []
    for i, (w, b) in enumerate(zip(world.weights, world.batches, strict=True)):
        a = float(np.dot(w, upper[i]))
        out.append(max(true_speedup(a, g, b, world.params.cost_error) for g in range(G + 1)))
    return out
