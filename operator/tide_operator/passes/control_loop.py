"""One control pass per TideDeployment: observe, decide with the pure policy, act, report.

The policy (control/policy.py) decides; this module only turns its actions into effects and its
state into status. Effects are behind a small protocol (``Effects``) so the pass is tested with
fakes and runs against the cluster, the serving pods and S3 through ``effects.ClusterEffects``.
A failed effect is reported (Degraded) and retried on the next pass: the policy's state is only
committed when every effect of the pass succeeded, so nothing is half-done and forgotten. The
exception is a candidate whose files the registry or the pods refuse (checksum, manifest, target):
retrying cannot fix its bytes, so it is rolled back at once (lifecycle.refuse_candidate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from tide_contracts.registry import CaptureObject
from tide_operator.api.conditions import ConditionType, Reason, rfc3339
from tide_operator.api.status import CanaryStatus, Decision, DraftStatus, Phase, SpeculationStatus
from tide_operator.control import actions as act
from tide_operator.control.cost_model import expected_acceptance_length, practical_speedup, tokens_for_batch_size
from tide_operator.control.lifecycle import LifecycleState, refuse_candidate
from tide_operator.control.lifecycle import Phase as LifecyclePhase
from tide_operator.control.manual import (
    REQUEST_REFUSED,
    ManualRequest,
    Refusal,
    abort_request,
    after_flip,
    flip_request,
)
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide
from tide_operator.passes.pod_convergence import CanaryPods, CanarySpeculation
from tide_operator.passes.serving_status import EventNote, StatusDraft

PODS_CONVERGED = "PodsConverged"
DRAFTS_CONVERGED = "DraftsConverged"
PODS_ROLLED = "PodsRolledForSpeculation"


class EffectError(RuntimeError):
    """An effect could not be carried out (a pod, S3 or the API refused); retried next pass.

    ``reason`` is the Degraded condition's reason: which dependency failed.
    """

    def __init__(self, message: str, reason: str = Reason.STORAGE_UNREACHABLE) -> None:
        super().__init__(message)
        self.reason = reason


class DraftRefused(EffectError):
    """The registry or a pod refused a draft's files (checksum, manifest, target): retrying cannot help.

    ``reason`` is a condition reason (ChecksumMismatch, IncompatibleDraft, ManifestInvalid).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message, reason)


class Effects(Protocol):
    def set_speculation(self, action: act.SetSpeculation) -> str | None: ...  # why pods were rolled
    def set_capture(self, action: act.SetCapture) -> None: ...
    def launch_training(self, action: act.LaunchTraining) -> None: ...
    def launch_recall(self, action: act.LaunchRecall) -> None: ...
    def cancel_training(self, action: act.CancelTraining) -> None: ...
    def start_canary(self, action: act.StartCanary) -> None: ...
    def promote(self, action: act.Promote) -> EventNote | None: ...  # what the draft pool's index said
    def roll_back(self, action: act.RollBack) -> None: ...
    def serve_draft(self, action: act.ServeDraft) -> None: ...
    def invalidate(self, action: act.InvalidateArtifacts) -> None: ...
    def flip_pointer(self, action: act.FlipPointer) -> tuple[str | None, str]: ...  # the version before, after
    def converge(self, speculation: bool, capture: bool, bands: act.Bands | None = None,
                 canary: CanarySpeculation | None = None, acceptance: float | None = None) -> list[str]: ...
    def converge_drafts(self, canary: CanaryPods | None) -> list[str]: ...  # the pods swapped, described


_EFFECT_METHODS = {
    act.SetSpeculation: "set_speculation", act.SetCapture: "set_capture", act.LaunchTraining: "launch_training",
    act.LaunchRecall: "launch_recall", act.CancelTraining: "cancel_training", act.StartCanary: "start_canary",
    act.Promote: "promote", act.RollBack: "roll_back", act.ServeDraft: "serve_draft",
    act.InvalidateArtifacts: "invalidate",
}


def _effect(effects: Effects, action: act.Action) -> Callable[..., object]:
    """The effect carrying ``action`` out (looked up per action: an Effects need only what it is asked)."""
    return getattr(effects, _EFFECT_METHODS[type(action)])  # type: ignore[no-any-return]


@dataclass(frozen=True)
class SensorReading:
    """The pass's observation, or why there is none (Prometheus or S3 unreachable)."""

    observation: Observation | None
    error: str | None = None
    captures: tuple[CaptureObject, ...] = ()  # the buffer as listed this pass (pruning reuses it)
    error_reason: str = Reason.PROMETHEUS_UNREACHABLE  # or StorageUnreachable: which source failed


def control_pass(draft: StatusDraft, params: PolicyParams, reading: SensorReading, effects: Effects,
                 now: float, manual: ManualRequest | None = None) -> PolicyState:
    """Run the policy once; update ``draft`` (speculation, decision, conditions, phase); return the state kept.

    A user's requests (``manual``, control/manual.py) are carried out first, whatever Prometheus says,
    and the policy then decides from where they left the deployment.
    """
    state = PolicyState.from_dict(draft.status.control_state) if draft.status.control_state else PolicyState()
    if manual is not None and manual.keys:
        handled = _manual(draft, manual, state, params, effects, now)
        if handled is None:
            return state  # an effect failed: the request stays for the next pass
        state, served = handled
        draft.update(control_state=state.to_dict())
        if served is not None and reading.observation is not None:
            reading = replace(reading, observation=replace(reading.observation, promoted_version=served))
    if reading.observation is None:
        # Decisions hold: nothing is switched on missing data, and status says why.
        draft.condition(ConditionType.DEGRADED, True, reading.error_reason, reading.error or "no observation",
                        warn=True)
        return state
    actions, new_state = decide(reading.observation, state, params, now)
    rolled: list[str] = []
    notes: list[EventNote] = []
    failed = _carry_out(actions, effects, rolled, notes)
    refused = _refused_candidate(failed)
    if refused is not None:
        step = refuse_candidate(state.lifecycle, refused.reason, str(refused), now)
        actions = list(step.actions)
        new_state = replace(state, lifecycle=step.state, lifecycle_reason=step.reason,
                            lifecycle_message=step.message)
        failed = _carry_out(actions, effects, rolled, notes)
    draft.events.extend(notes)  # what effects that succeeded reported, even when a later one failed
    if failed is not None:
        action, error = failed
        reason = error.reason
        draft.condition(ConditionType.DEGRADED, True, reason, f"{type(action).__name__}: {error}", warn=True)
        return state  # retry the same decision next pass
    draft.condition(ConditionType.DEGRADED, False, Reason.AS_EXPECTED, "observations and actions succeed")
    _report(draft, actions, new_state, params, reading.observation, now)
    for why in rolled:  # the fallback where a pod cannot switch live: say so, in status and as an Event
        draft.events.append(EventNote("Warning", PODS_ROLLED, why, action="RollPods"))
        enabled = new_state.speculation.enabled
        draft.condition(ConditionType.SPECULATION_ENABLED, enabled, new_state.speculation_reason or Reason.NO_DRAFT,
                        f"{new_state.speculation_message or 'switched'}; pods rolled (no runtime switch)")
    _training_ended(draft, state, new_state)
    _converge(draft, effects, actions, new_state, params)
    return new_state


def _manual(draft: StatusDraft, request: ManualRequest, state: PolicyState, params: PolicyParams,
            effects: Effects, now: float) -> tuple[PolicyState, str | None] | None:
    """Abort, then promote or roll back by hand; the state after them and the version now served (None:
    the pointer did not move). None when an effect failed: nothing is consumed, the pass retries."""
    aborted = abort_request(request, state.lifecycle, now)
    if isinstance(aborted, Refusal):
        _refused(draft, aborted)
    elif aborted is not None:
        failed = _carry_out(list(aborted.actions), effects, [])
        if failed is not None:
            draft.condition(ConditionType.DEGRADED, True, failed[1].reason, f"aborting the canary: {failed[1]}",
                            warn=True)
            return None
        state = replace(state, lifecycle=aborted.state, lifecycle_reason=aborted.reason,
                        lifecycle_message=aborted.message)
        draft.update(canary=None)
        _decided(draft, aborted.actions[-1], "Warning")
    flip = flip_request(request, state, params)
    served = None
    if isinstance(flip, Refusal):
        _refused(draft, flip)
    elif flip is not None:
        try:
            before, served = effects.flip_pointer(flip)
        except DraftRefused as e:  # an unknown version, another target revision: asking again cannot help
            _refused(draft, Refusal(flip.annotation, str(e)))
        except EffectError as e:
            draft.condition(ConditionType.DEGRADED, True, e.reason, f"{flip.reason}: {e}", warn=True)
            return None
        else:
            if before != served:
                state = after_flip(state, params, now)
            _decided(draft, replace(flip, message=f"{before or 'initial'} -> {served}: {flip.message}"), "Normal")
    draft.consumed_requests.extend(request.keys)
    return state, served


def _refused(draft: StatusDraft, refusal: Refusal) -> None:
    draft.events.append(EventNote("Warning", REQUEST_REFUSED, f"{refusal.annotation}: {refusal.message}",
                                  action="ManualRequest"))


def _decided(draft: StatusDraft, action: act.Action | act.FlipPointer, kind: str) -> None:
    name = type(action).__name__
    draft.update(last_decision=Decision(time=rfc3339(draft.now), action=name, reason=action.reason,
                                        message=action.message))
    draft.events.append(EventNote(kind, action.reason, f"{name}: {action.message}", action=name))


# How a trainer Job's end moves the lifecycle out of Training. "Not better" (exit 7) is the trainer
# doing its job, not a failure (ShiftPersists: not better, and the shift still calls for another run);
# a run cancelled (target change) is neither and is not counted.
TRAINING_OUTCOMES = {"TrainingSucceeded": "succeeded", "CandidateNotBetter": "succeeded", "ShiftPersists": "succeeded",
                     "TrainingFailed": "failed", "TrainingDeadlineExceeded": "failed", "TrainingNoGpu": "failed",
                     "TrainingGaveUp": "failed"}


def _training_ended(draft: StatusDraft, old: PolicyState, new: PolicyState) -> None:
    """An Event when a trainer Job ends, carrying its outcome for tide_operator_training_jobs_total."""
    if old.lifecycle.phase is not LifecyclePhase.TRAINING or new.lifecycle.phase is LifecyclePhase.TRAINING:
        return
    outcome = TRAINING_OUTCOMES.get(new.lifecycle_reason)
    if outcome is not None:
        draft.events.append(EventNote("Warning" if outcome == "failed" else "Normal", new.lifecycle_reason,
                                      new.lifecycle_message, training_outcome=outcome))


def _converge(draft: StatusDraft, effects: Effects, actions: list[act.Action], state: PolicyState,
              params: PolicyParams) -> None:
    """Pods that started after a switch get it now (pod_convergence.py).

    Not while paused (the user holds the pods as they are), nor in a pass that just switched every pod.
    A probe (control/probe.py) has the pods speculate while the switch is off: they converge to that.
    A canary started while the fleet drafted nothing at the load keeps its pods speculating with the
    candidate's table (control/canary_speculation.py); once it ends (promoted, rolled back) they
    converge to the fleet's setting like every other pod.
    """
    if params.paused or any(isinstance(a, act.SetSpeculation | act.SetCapture) for a in actions):
        return
    try:
        fixed = effects.converge(state.speculating, state.lifecycle.capture_enabled, state.table,
                                 _speculating_canary(state), acceptance=state.table_acceptance)
    except EffectError as e:
        draft.condition(ConditionType.DEGRADED, True, e.reason, f"converging pods: {e}", warn=True)
        return
    if fixed:
        draft.events.append(EventNote("Normal", PODS_CONVERGED, "; ".join(fixed) + " (missed while it started)",
                                      action="Converge"))
    _converge_drafts(draft, effects, actions, state, params)


def _speculating_canary(state: PolicyState) -> CanarySpeculation | None:
    """The canary whose pods speculate on their own: while it runs, unless a probe has every pod draft.

    Not only while the switch is off: with it on, the fleet's table can still draft nothing at the load
    (g = 0 in its band), and canary pods that followed it measured nothing and ended Inconclusive.
    """
    lifecycle = state.lifecycle
    if lifecycle.phase is not LifecyclePhase.CANARY or not lifecycle.canary_alone or state.probe.running:
        return None
    return CanarySpeculation(lifecycle.canary_pods, lifecycle.canary_bands)


# Actions that load drafts on pods: a pass that took one leaves the swapping of stragglers to the next.
_DRAFT_ACTIONS = act.StartCanary | act.Promote | act.RollBack | act.ServeDraft


def _converge_drafts(draft: StatusDraft, effects: Effects, actions: list[act.Action], state: PolicyState,
                     params: PolicyParams) -> None:
    """Pods serving another draft than the pointer (the candidate on canary pods) are swapped.

    Not under spec.control.draftPin: ServeDraft serves the pin to every pod.
    """
    if params.draft_pin is not None or any(isinstance(a, _DRAFT_ACTIONS) for a in actions):
        return
    lifecycle = state.lifecycle
    canary = (CanaryPods(lifecycle.candidate, lifecycle.canary_pods, lifecycle.candidate_recalled)
              if lifecycle.phase is LifecyclePhase.CANARY and lifecycle.candidate else None)
    try:
        swapped = effects.converge_drafts(canary)
    except EffectError as e:
        draft.condition(ConditionType.DEGRADED, True, e.reason, f"converging drafts: {e}", warn=True)
        return
    if swapped:
        draft.events.append(EventNote("Normal", DRAFTS_CONVERGED, "; ".join(swapped), action="ConvergeDrafts"))


def _carry_out(actions: list[act.Action], effects: Effects, rolled: list[str],
               notes: list[EventNote] | None = None) -> tuple[act.Action, EffectError] | None:
    """Carry out the actions in order; the first that fails stops the rest (they may depend on it).

    An effect that had to roll the pods instead of switching them live says why (into ``rolled``); one
    that succeeded with something to report (the draft pool's index not updated) returns an Event
    (into ``notes``).
    """
    for action in actions:
        try:
            why = _effect(effects, action)(action)
        except EffectError as e:
            return action, e
        if isinstance(why, str):
            rolled.append(why)
        elif isinstance(why, EventNote) and notes is not None:
            notes.append(why)
    return None


def _refused_candidate(failed: tuple[act.Action, EffectError] | None) -> DraftRefused | None:
    """A candidate whose files are refused is rolled back at once instead of retried every pass.

    Promote raises DraftRefused only for the registry's checks, before the pointer moves.
    """
    if failed is None:
        return None
    action, error = failed
    if isinstance(error, DraftRefused) and isinstance(action, act.StartCanary | act.Promote):
        return error
    return None


def _report(draft: StatusDraft, actions: list[act.Action], state: PolicyState, params: PolicyParams,
            observation: Observation, now: float) -> None:
    enabled = state.speculation.enabled
    draft.condition(ConditionType.SPECULATION_ENABLED, enabled, state.speculation_reason or Reason.NO_DRAFT,
                    state.speculation_message or state.speculation_reason or "no decision yet")
    lifecycle = state.lifecycle
    draft.condition(ConditionType.COLLECTING, lifecycle.capture_enabled,
                    Reason.DRIFT_DETECTED if lifecycle.capture_enabled else Reason.CAPTURE_DISABLED,
                    state.lifecycle_message or "capture state")
    draft.condition(ConditionType.TRAINING, lifecycle.phase is LifecyclePhase.TRAINING, Reason.TRAINER_RUNNING
                    if lifecycle.phase is LifecyclePhase.TRAINING else Reason.AS_EXPECTED,
                    f"run {lifecycle.active_run}" if lifecycle.active_run else "no trainer Job running")
    _promoting(draft, lifecycle)
    canary = (CanaryStatus(candidate=lifecycle.candidate, pods=lifecycle.canary_pods)
              if lifecycle.phase is LifecyclePhase.CANARY and lifecycle.candidate else None)
    draft.update(speculation=_speculation_status(state, params, observation), control_state=state.to_dict(),
                 canary=canary, draft=_draft_status(lifecycle, params, observation))
    if actions:
        last = actions[-1]
        draft.update(last_decision=Decision(time=rfc3339(draft.now), action=type(last).__name__,
                                            reason=last.reason or "Decided", message=last.message or None))
        for action in actions:
            draft.events.append(_event(action))
    if draft.status.phase in (Phase.SERVING, *_LIFECYCLE_PHASES.values()):
        draft.update(phase=_LIFECYCLE_PHASES.get(lifecycle.phase, Phase.SERVING))


def _promoting(draft: StatusDraft, lifecycle: LifecycleState) -> None:
    """True during a canary; afterwards False with how the last canary ended (until the next one)."""
    if lifecycle.phase is LifecyclePhase.CANARY:
        draft.condition(ConditionType.PROMOTING, True, Reason.CANARY_RUNNING, f"canary of {lifecycle.candidate}")
    elif lifecycle.last_canary_reason:
        draft.condition(ConditionType.PROMOTING, False, lifecycle.last_canary_reason, lifecycle.last_canary_message)
    else:
        draft.condition(ConditionType.PROMOTING, False, Reason.AS_EXPECTED, "no canary")


_LIFECYCLE_PHASES = {LifecyclePhase.COLLECTING: Phase.COLLECTING, LifecyclePhase.RECALLING: Phase.RECALLING,
                     LifecyclePhase.TRAINING: Phase.TRAINING, LifecyclePhase.EVALUATING: Phase.EVALUATING,
                     LifecyclePhase.CANARY: Phase.CANARY}


def _draft_status(lifecycle: LifecycleState, params: PolicyParams, observation: Observation) -> DraftStatus:
    """The served version as this pass read it (the S3 pointer, else ``initial``) and the candidate."""
    served = observation.promoted_version
    return DraftStatus(current=served, candidate=lifecycle.candidate,
                       served_revision=params.target_revision if served else None)


def _speculation_status(state: PolicyState, params: PolicyParams, observation: Observation) -> SpeculationStatus:
    a, batch = state.acceptance_estimate, observation.batch_size
    g = params.num_speculative_tokens if state.speculation.enabled else 0
    # The model at the g the engine runs at this batch size (its table's band), not at the maximum K.
    chosen = tokens_for_batch_size(state.table, batch) if g and state.table is not None and batch is not None else g
    speedup = None
    if a is not None and batch is not None and g:
        speedup = round(100 * practical_speedup(a, chosen, max(batch, 1.0), params.profile)) if chosen else 100
    length = observation.acceptance_length
    if length is None and a is not None and chosen:
        length = expected_acceptance_length(a, chosen)
    return SpeculationStatus(enabled=state.speculation.enabled, num_speculative_tokens=g,
                             modelled_speedup_percent=speedup,
                             acceptance_length_milli=round(1000 * length) if length is not None else None,
                             acceptance_length=round(length, 3) if length is not None else None)


def _event(action: act.Action) -> EventNote:
    kind = "Warning" if isinstance(action, act.RollBack) else "Normal"
    name = type(action).__name__
    return EventNote(kind, action.reason or name, f"{name}: {action.message}", action=name)
