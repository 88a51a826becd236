"""The control policy: one pure function from observations to actions (docs/policy.md).

    actions, state = decide(observation, state, params, now)

It chains the drift detector (shift?), the draft lifecycle (collect, train, canary, promote or
roll back), the speculation decision (on/off and g per batch-size band) and the probe that
re-measures a served draft speculation has stopped measuring (probe.py). The state is plain
data (to_dict/from_dict) that the operator keeps in status, so scenarios, benchmarks and the
operator all drive exactly the same logic. Its types are in control/policy_types.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tide_operator.control import actions as act
from tide_operator.control import probe as probing
from tide_operator.control.canary import FirstDraftParams, PodGroupMetrics
from tide_operator.control.canary_speculation import candidate_bands
from tide_operator.control.cost_model import (
    acceptance_rate_from_length,
    expected_acceptance_length,
    tokens_for_batch_size,
    tokens_per_batch_size_table,
)
from tide_operator.control.draft_return import returned_to
from tide_operator.control.drift import DriftState, rise_detected, shift_detected, update_drift
from tide_operator.control.lifecycle import (
    LifecycleInput,
    LifecycleParams,
    LifecycleState,
    step_lifecycle,
)
from tide_operator.control.policy_types import Observation, PolicyParams, PolicyState
from tide_operator.control.probe import REASON_PROBE_ENDED, REASON_PROBING, DraftModel, ProbePlan, ProbeState
from tide_operator.control.speculation import (
    Decision,
    SpeculationAction,
    SpeculationInput,
    SpeculationMode,
    SpeculationState,
    decide_speculation,
)

__all__ = ["Observation", "PolicyParams", "PolicyState", "decide"]  # the types re-exported: one place to import


def decide(
    observation: Observation, state: PolicyState, params: PolicyParams, now: float
) -> tuple[list[act.Action], PolicyState]:
    if params.paused:
        return [], replace(state, speculation_reason="Paused", lifecycle_reason="Paused")
    observed_a = _observed_acceptance(observation, state, params)
    measured = observed_a is not None and _drafting(state, observation.batch_size)
    if state.drift.hold_until is not None and now < state.drift.hold_until:
        observed_a = None  # just promoted: the rate window still holds the previous draft's numbers
    drift = update_drift(state.drift, observed_a, observation.acceptance_samples, now, params.drift)
    estimate = observed_a if observed_a is not None else state.acceptance_estimate
    shift = shift_detected(drift, params.drift, active=state.shift_active)
    rise = rise_detected(drift, params.drift, active=state.rise_active)
    lifecycle_input = _lifecycle_input(observation, state, estimate, params, shift, shift and not state.shift_active,
                                       rise and not state.rise_active)
    step = step_lifecycle(state.lifecycle, lifecycle_input, lifecycle_params(params), now)
    actions: list[act.Action] = list(step.actions)
    if params.draft_pin is not None and observation.promoted_version != params.draft_pin:
        message = f"spec.draftPin={params.draft_pin}, serving {observation.promoted_version}"
        actions.append(act.ServeDraft(params.draft_pin, "DraftPinned", message))
    draft = _served_draft(actions, observation, state, params, step.state, now, estimate, drift)
    has_draft, estimate, drift, speculation_state = draft
    new_state = replace(
        state,
        drift=drift,
        shift_active=shift_detected(drift, params.drift, active=state.shift_active),
        rise_active=rise_detected(drift, params.drift, active=state.rise_active),
        lifecycle=step.state,
        acceptance_estimate=estimate,
        lifecycle_reason=step.reason,
        lifecycle_message=step.message,
    )
    new_draft = any(isinstance(a, act.Promote | act.ServeDraft) for a in actions)
    served = _Served(has_draft, measured, new_draft, speculation_state)
    set_speculation, new_state = _speculate(observation, state, new_state, params, served, now)
    if set_speculation is not None:
        actions.insert(0, set_speculation)
    return actions, new_state


@dataclass(frozen=True)
class _Served:
    """This pass's facts about the served draft that the speculation decision reads."""

    has_draft: bool
    measured: bool  # the rate window showed its acceptance, and the pods draft at this load
    new_draft: bool  # a promotion or ServeDraft loads another draft in this pass
    speculation: SpeculationState  # the switch's state (a promotion waives its dwell)


def _speculate(observation: Observation, before: PolicyState, state: PolicyState, params: PolicyParams,
               served: _Served, now: float) -> tuple[act.SetSpeculation | None, PolicyState]:
    """The fleet switch (speculation.py) and the probe (probe.py): the SetSpeculation to send, if any."""
    model, a, b = _draft_model(params), state.acceptance_estimate, observation.batch_size
    # Its best so far from the detector's short average: the best of the raw noisy windows is biased high
    # and had probes drafting at loads where the draft never paid.
    smoothed = state.drift.short_ema if state.drift.ready else a
    probe = probing.track(before.probe, served.measured, smoothed, now)
    if served.new_draft:
        probe = ProbeState(best_acceptance=a)  # another draft: its own best; the pods load it as decided
    may_probe = params.speculation is SpeculationMode.ADAPTIVE and served.has_draft
    ending = probe.running and (not may_probe or probing.end_due(probe, model, served.measured, a, b,
                                                                  params.observation_window_s, now))
    switch = served.speculation
    if ending:  # the window was the measurement: no second dwell, either way
        switch = replace(switch, pending_since=now - params.decision.min_dwell_s)
    decision = decide_speculation(
        SpeculationInput(a, b, params.num_speculative_tokens, params.adaptive_speculative_tokens,
                         served.has_draft, params.max_batch_size),
        switch, params.speculation, params.decision, now, profile=params.profile,
    )
    state = replace(state, speculation=decision.state, speculation_reason=decision.reason,
                    speculation_message=decision.message, probe=probe)
    switched = decision.action is not SpeculationAction.HOLD
    if probe.running and not ending and not switched:
        message = f"probing the served draft since {probe.started_at:.0f}: {decision.message}"
        return None, replace(state, speculation_reason=REASON_PROBING, speculation_message=message)
    if probe.running:
        return _end_probe(decision, replace(state, probe=probing.ended(probe, now)), params, may_probe)
    plan = None if switched or not may_probe else probing.plan_start(
        probe, model, a, b, params.decision.probe_interval_s, params.observation_window_s, now)
    if plan is not None:
        return _start_probe(state, params, model, plan, now)
    return _speculation_action(decision, state, params, pods_on=before.speculating)


def _start_probe(state: PolicyState, params: PolicyParams, model: DraftModel, plan: ProbePlan,
                 now: float) -> tuple[act.SetSpeculation, PolicyState]:
    table = model.probe_table(plan.estimate, plan.best, params.max_batch_size)
    message = (f"no acceptance of the served draft for {plan.quiet_s:.0f}s: speculating for one "
               f"{params.observation_window_s:.0f}s window to measure it, g={plan.tokens} at "
               f"batch_size={plan.batch_size:.1f} (last acceptance_rate={plan.estimate:.3f}, best {plan.best:.3f})")
    state = replace(state, probe=probing.started(state.probe, now), table=table, table_acceptance=None,
                    speculation_reason=REASON_PROBING, speculation_message=message)
    return act.SetSpeculation(True, params.num_speculative_tokens, table, REASON_PROBING, message), state


def _end_probe(decision: Decision, state: PolicyState, params: PolicyParams,
               may_probe: bool) -> tuple[act.SetSpeculation | None, PolicyState]:
    """The normal decision from the probe's measurement; off at once when the draft still does not pay."""
    stays_off = may_probe and not decision.state.enabled
    reason = REASON_PROBE_ENDED if stays_off else decision.reason
    ended = replace(decision, reason=reason, message=f"probe ended: {decision.message}")
    state = replace(state, speculation_reason=ended.reason, speculation_message=ended.message)
    return _speculation_action(ended, state, params, pods_on=True)


def _draft_model(params: PolicyParams) -> DraftModel:
    return DraftModel(params.num_speculative_tokens, params.adaptive_speculative_tokens, params.profile,
                      params.decision.off_threshold)


def _served_draft(
    actions: list[act.Action],
    observation: Observation,
    state: PolicyState,
    params: PolicyParams,
    lifecycle: LifecycleState,
    now: float,
    estimate: float | None,
    drift: DriftState,
) -> tuple[bool, float | None, DriftState, SpeculationState]:
    """Whether a draft is served, its acceptance and detector state after this pass's actions."""
    has_draft = observation.promoted_version is not None or params.draft_pin is not None
    speculation_state = state.speculation
    if any(isinstance(a, act.Promote) for a in actions):
        has_draft = True
        if lifecycle.promoted_acceptance is not None:  # what the canary pods measured, at the g they ran
            estimate = lifecycle.promoted_acceptance
        elif lifecycle.promoted_acceptance_length is not None:  # an analysis from older status
            estimate = acceptance_rate_from_length(lifecycle.promoted_acceptance_length,
                                                   _canary_tokens(observation, state, params))
        drift = _restart_drift(estimate, now, params)
        # The canary window already watched this draft live: no second stabilization wait.
        speculation_state = replace(speculation_state, pending_since=now - params.decision.min_dwell_s)
    if any(isinstance(a, act.ServeDraft) and a.version is None for a in actions):
        drift, has_draft, estimate = DriftState(), False, None
    return has_draft, estimate, drift, speculation_state


def _drafting(state: PolicyState, batch_size: float | None) -> bool:
    """Whether the pods draft at this batch size: once they stop, the rate window's acceptance only
    describes the past (for up to one window), so the draft counts as unmeasured from then on."""
    if state.probe.running:
        return True
    if not state.speculation.enabled or batch_size is None or math.isnan(batch_size):
        return False
    return state.table is None or tokens_for_batch_size(state.table, batch_size) > 0


def _observed_acceptance(observation: Observation, state: PolicyState, params: PolicyParams) -> float | None:
    """Per-token a of the served draft from this observation, or None when there is no data.

    Position 0's acceptance is a itself whatever g the engine used; the mean length mixes the g
    of every batch-size band, so it is only the fallback.
    """
    if not state.speculating or observation.acceptance_samples <= 0:
        return None
    first = observation.per_position_acceptance[0] if observation.per_position_acceptance else None
    if first is not None and not math.isnan(first):
        return min(max(first, 0.0), 1.0)
    length = observation.acceptance_length
    if length is not None and not math.isnan(length):
        g = params.num_speculative_tokens
        if state.table is not None and observation.batch_size is not None:
            g = tokens_for_batch_size(state.table, observation.batch_size) or g
        return acceptance_rate_from_length(length, g)
    rate = observation.acceptance_rate
    return None if rate is None or math.isnan(rate) else min(max(rate, 0.0), 1.0)


def _lifecycle_input(
    observation: Observation, state: PolicyState, estimate: float | None, params: PolicyParams, shift: bool,
    shift_started: bool,
    rise_started: bool = False,
) -> LifecycleInput:
    served_length: float | None = 1.0  # no draft: decoding yields one token per step
    if observation.promoted_version is not None:
        served_length = (
            None if estimate is None else expected_acceptance_length(estimate, params.num_speculative_tokens)
        )
    return LifecycleInput(
        shift=shift,
        shift_started=shift_started,
        rise_started=rise_started,
        buffer_samples=observation.buffer_samples,
        buffer_since=observation.buffer_since,
        served_acceptance_length=served_length,
        target_revision=params.target_revision,
        training=observation.training,
        canary=_canary_acceptance(observation, state, params),
        control=observation.control,
        draft_pin=params.draft_pin,
        abort_canary=params.abort_canary,
        ready_pods=observation.ready_pods,
        first_draft=observation.promoted_version is None,  # nothing but the bootstrap head at K=0 served
        pool=observation.pool,
        recall=observation.recall,
        returned_to=returned_to(observation.traffic) if observation.traffic is not None else None,
        training_deferred=observation.training_deferred,
        batch_size=observation.batch_size,
        # canary_speculation.py: the fleet's pods draft nothing at this load, so a canary's would measure
        # nothing (a probe running now ends within one window).
        canary_alone=params.speculation is SpeculationMode.ADAPTIVE and not _fleet_drafts(state, observation),
        canary_bands=candidate_bands(state.lifecycle.candidate_acceptance_length, params.num_speculative_tokens,
                                     params.max_batch_size, params.profile, params.decision.off_threshold,
                                     adaptive_tokens=params.adaptive_speculative_tokens),
    )


def _fleet_drafts(state: PolicyState, observation: Observation) -> bool:
    """The fleet's switch is on and its table drafts at the observed load (unknown load: the switch)."""
    if not state.speculation.enabled:
        return False
    b = observation.batch_size
    if state.table is None or b is None or not b > 0:
        return True
    return tokens_for_batch_size(state.table, b) > 0


def _speculation_action(
    decision: Decision, state: PolicyState, params: PolicyParams, *, pods_on: bool
) -> tuple[act.SetSpeculation | None, PolicyState]:
    """SetSpeculation when the pods must change (a switch, a probe's end), or the table must be retuned.

    ``pods_on``: whether the pods were speculating (the switch, or a probe) before this pass.
    """
    switched = decision.action is not SpeculationAction.HOLD
    if not decision.state.enabled:
        if not pods_on:
            return None, state
        off = replace(state, table=None, table_acceptance=None)
        return act.SetSpeculation(False, 0, None, decision.reason, decision.message), off
    a = state.acceptance_estimate
    table = state.table
    if params.adaptive_speculative_tokens and a is not None:
        moved = state.table_acceptance is None or abs(a - state.table_acceptance) > (
            params.decision.hysteresis_percent / 100
        )
        # The last band ends at the engine's max_num_seqs: a fleet reporting another one gets a new table.
        if moved or (table is not None and table[-1][1] != params.max_batch_size):
            rows = tokens_per_batch_size_table(
                a, params.num_speculative_tokens, params.max_batch_size, params.profile,
                params.decision.off_threshold,
            )  # fmt: skip
            table = tuple((start, end, k) for start, end, k in rows)
            state = replace(state, table_acceptance=a)
    if not switched and table == state.table:
        return None, state
    state = replace(state, table=table)
    reason = decision.reason if switched else "SpeculativeTokensRetuned"
    return act.SetSpeculation(True, params.num_speculative_tokens, table, reason, decision.message,
                              acceptance=state.table_acceptance), state


def _restart_drift(estimate: float | None, now: float, params: PolicyParams) -> DriftState:
    """A new draft has a new acceptance: both EMAs start at its live (canary) value.

    Starting from the canary's number rather than warming up again means a workload shift that
    lands right after a promotion is still seen as a drop. For one observation window the fleet's
    numbers are ignored: they still average in the previous draft, and read as a drop (a false
    shift that cancelled the next training run in the policy bench).
    """
    if estimate is None:
        return DriftState()
    return DriftState(short_ema=estimate, long_ema=estimate, updated_at=now, warmup_samples=params.drift.min_samples,
                      hold_until=now + params.observation_window_s,
                      long_evidence_s=params.drift.short_half_life_s)


def _canary_acceptance(observation: Observation, state: PolicyState, params: PolicyParams) -> PodGroupMetrics | None:
    """The canary's metrics with its per-token a: position 0's when the sensors have it, else its
    length inverted at the g the canary pods run now (the analysis keeps it per measurement)."""
    canary = observation.canary
    if canary is None or canary.per_token_acceptance is not None:
        return canary
    length = canary.acceptance_length
    if length is None or math.isnan(length):
        return canary
    return replace(canary, per_token_acceptance=acceptance_rate_from_length(
        length, _canary_tokens(observation, state, params)))


def _canary_tokens(observation: Observation, state: PolicyState, params: PolicyParams) -> int:
    """The g the canary pods run with now: the fleet's table at the observed batch (their own while they
    speculate alone), else the full g."""
    lifecycle = state.lifecycle
    if lifecycle.canary_alone and not state.speculating and observation.batch_size is not None:
        bands = lifecycle.canary_bands
        return (tokens_for_batch_size(bands, observation.batch_size) if bands else 0) or params.num_speculative_tokens
    if state.speculation.enabled and state.table is not None and observation.batch_size is not None:
        return tokens_for_batch_size(state.table, observation.batch_size) or params.num_speculative_tokens
    return params.num_speculative_tokens


def lifecycle_params(params: PolicyParams) -> LifecycleParams:
    # A first draft is promoted only if speculation would switch on with it (its on-threshold, its model).
    first = FirstDraftParams(params.num_speculative_tokens, params.decision.on_threshold, params.profile)
    return LifecycleParams(capture=params.capture, training=params.training, canary=params.canary,
                           recall=params.recall, deployment_uid=params.deployment_uid, first_draft=first)
