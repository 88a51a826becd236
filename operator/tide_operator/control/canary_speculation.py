"""How a canary's pods speculate while the fleet does not (issue 15, after mechanisms 1-5).

vLLM reports acceptance only for tokens it drafted. When the fleet's pods draft nothing at the current
load (the switch is off because the served draft does not pay: a bad domain shift, a bad launch draft;
or the switch is on but the table's band at this load has g = 0), canary pods that followed the fleet
measured nothing: every such canary ended Inconclusive, counted as a rollback, and after two
collection stopped, so a candidate trained exactly for the new traffic was never promoted.

So a canary that starts while the fleet drafts nothing at the observed load (Adaptive mode; a probe
running then ends within one window) has its pods speculate with the candidate's table for the whole
canary (pod convergence; while a probe runs they follow it like every pod), and is judged like a first draft
(canary.measure_first_draft): its modelled speedup at the observed load must clear the on-threshold,
and its throughput must hold against the control pods, which do not speculate. There is no live
acceptance of the served draft to beat. Under ``speculation: Off`` the pods stay off (the user's).

The table: the one the candidate's evaluation acceptance implies, what the fleet would run once it is
promoted. K everywhere would lose throughput at loads where a smaller g pays (or none), and the
throughput guard would then fail a good candidate; bands at g = 0 draft nothing where even the
evaluation's acceptance does not pay, which costs nothing and which the judgement at the observed load
would not accept anyway. The canary pods report position 0's acceptance, which is a whatever g ran.
Without adaptive tokens: the launch table (K at every batch size), as the fleet would run.
"""

from __future__ import annotations

import math

from tide_operator.control.actions import Bands
from tide_operator.control.cost_model import CostProfile, acceptance_rate_from_length, tokens_per_batch_size_table


def candidate_bands(candidate_length: float | None, speculative_tokens: int, max_batch_size: int,
                    profile: CostProfile, min_speedup: float, *, adaptive_tokens: bool) -> Bands | None:
    """The canary pods' table for a candidate of this evaluation acceptance length (None: the launch table)."""
    if not adaptive_tokens or candidate_length is None or math.isnan(candidate_length):
        return None
    a = acceptance_rate_from_length(candidate_length, speculative_tokens)
    rows = tokens_per_batch_size_table(a, speculative_tokens, max_batch_size, profile, min_speedup)
    return tuple((start, end, k) for start, end, k in rows)
