"""The draft lifecycle's data: phases, parameters, what one pass sees, and the state it keeps.

Plain frozen dataclasses (the state is stored in status, control/restart.py), and the three step
constructors every transition uses; the transitions are in control/lifecycle.py (dispatch, shift,
pin, target change), lifecycle_training.py and lifecycle_canary.py.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum

from tide_operator.control import actions as act
from tide_operator.control.canary import CanaryAnalysis, CanaryParams, FirstDraftParams, PodGroupMetrics


class Phase(StrEnum):
    SERVING = "Serving"
    COLLECTING = "Collecting"
    TRAINING = "Training"
    RECALLING = "Recalling"  # an evaluation Job scores the draft pool on the traffic since a shift
    EVALUATING = "Evaluating"
    CANARY = "Canary"
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"


class TrainingStatus(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    MISSING = "Missing"  # the Job is gone without an outcome: counts as a failure
    NOT_BETTER = "NotBetter"  # trainer exit 7: trained and evaluated, no better than the served draft
    DEADLINE_EXCEEDED = "DeadlineExceeded"  # the Job ran past activeDeadlineSeconds: a failed run
    NO_GPU = "NoGpu"  # trainer exit 8: the Job asked for GPUs and torch saw none: a failed run


@dataclass(frozen=True)
class CaptureParams:
    """spec.control.capture; only `enabled` matters here, the rest bounds the S3 buffer."""

    enabled: bool = True
    sampling_percent: float = 100.0
    max_buffer_samples: int = 4096
    max_buffer_bytes: int = 2 * 1024**3
    retention_s: float = 86400.0


@dataclass(frozen=True)
class TrainingParams:
    """spec.control.training (backoff in seconds)."""

    sample_threshold: int = 2048
    backoff_s: float = 600.0
    max_failures: int = 3  # consecutive failed runs before waiting for the next shift (0 acts as 1)

    def __post_init__(self) -> None:
        if self.sample_threshold < 1:
            raise ValueError("training.sampleThreshold must be >= 1")
        if self.max_failures < 0:
            raise ValueError("training.maxFailures must be >= 0")


@dataclass(frozen=True)
class RecallParams:
    """spec.control.draftPool: try the pool's drafts on a shift before training a new one.

    ``sample_threshold``: samples since the shift the evaluation scores on (a fraction of a training
    round's). ``shortfall_percent``: a recalled draft whose live acceptance length stays this far below
    its evaluation for two canary analysis windows is not the domain's draft after all: collect and
    train (spec.control.drift.thresholdPercent, the drift detector's own sensitivity).
    """

    enabled: bool = True
    sample_threshold: int = 256
    shortfall_percent: float = 10.0

    def __post_init__(self) -> None:
        if self.sample_threshold < 1:
            raise ValueError("draftPool.recallSampleThreshold must be >= 1")


@dataclass(frozen=True)
class RecallObservation:
    """The recall evaluation Job's outcome and, when it succeeded, its report's best pooled draft."""

    run_id: str
    status: TrainingStatus  # Running, Succeeded, Failed, Missing or DeadlineExceeded, as a trainer Job's
    best_version: str | None = None  # None: the report scored no pooled draft
    best_acceptance_length: float | None = None
    served_acceptance_length: float | None = None  # the served draft on the same samples


@dataclass(frozen=True)
class TrainingObservation:
    """The trainer Job's outcome and, when it succeeded, its evaluation report."""

    run_id: str
    status: TrainingStatus
    candidate_acceptance_length: float | None = None  # held-out eval of the new draft
    served_acceptance_length: float | None = None  # the served draft on the same eval data (the trainer's baseline)


@dataclass(frozen=True)
class LifecycleInput:
    shift: bool  # the drift detector signals a shift now
    buffer_samples: int  # captured since the last training launch
    served_acceptance_length: float | None  # of the promoted draft (1.0 when none; None = unknown)
    target_revision: str
    training: TrainingObservation | None = None
    canary: PodGroupMetrics | None = None
    control: PodGroupMetrics | None = None
    draft_pin: str | None = None
    abort_canary: bool = False
    shift_started: bool = False  # the shift signal rose in this pass
    rise_started: bool = False  # the acceptance rise signal rose in this pass (drift.rise_detected)
    # No draft was ever served (the pods run the bootstrap head at K=0): a canary is judged on its own
    # modelled speedup at batch_size, not against a served draft's acceptance.
    first_draft: bool = False
    batch_size: float | None = None  # running requests per engine, for the first draft's speedup
    ready_pods: tuple[str, ...] = ()  # serving pods that are ready and answer: a canary starts on some of them
    # The fleet's switch is off (Adaptive mode; a probe ends within a window): a canary started now has
    # its pods speculate with the candidate on their own, with canary_bands (None: the launch table),
    # and is judged like a first draft against control pods that do not speculate.
    canary_alone: bool = False
    canary_bands: act.Bands | None = None
    # The draft pool's other drafts for this target (`initial`, vN; not the served one): recall candidates.
    pool: tuple[str, ...] = ()
    recall: RecallObservation | None = None
    # The pooled draft whose training traffic the newest captures are clearly nearer than the served
    # draft's (control/draft_return.py): the traffic came back to its domain.
    returned_to: str | None = None
    # The fleet's verdict that a training run would not pay now (control/fleet.training_pays; None: it
    # would, or no GPUs are lent): the run waits, with this message. The pool's evaluation never waits.
    training_deferred: str | None = None
    buffer_since: float | None = None  # when that count starts (None: not known, as in the policy bench)


@dataclass(frozen=True)
class LifecycleState:
    phase: Phase = Phase.COLLECTING  # TIDE: collection starts enabled
    phase_since: float | None = None
    capture_enabled: bool = False
    target_revision: str | None = None
    run_counter: int = 0
    active_run: str | None = None
    candidate: str | None = None
    candidate_acceptance_length: float | None = None
    buffer_baseline: int = 0  # buffer_samples when collection (re)started: older samples are stale
    buffer_since: float | None = None  # the count buffer_baseline was taken from (LifecycleInput.buffer_since)
    rollbacks: int = 0  # consecutive canary rollbacks
    training_failures: int = 0
    last_failure_at: float | None = None
    last_promotion_at: float | None = None
    promoted_acceptance_length: float | None = None  # canary's live mean at the last promotion
    # The canary pods' mean per-token acceptance at the last promotion, at the g they ran (None in
    # state from before it was kept, or when no measurement had it).
    promoted_acceptance: float | None = None
    canary: CanaryAnalysis | None = None
    # The pods that got the candidate when the canary started: a rollback swaps exactly these back.
    canary_pods: tuple[str, ...] = ()
    # The canary pods speculate with the candidate on their own (the fleet did not when it started), with
    # this table (None: the launch table); pod convergence keeps them so until it ends.
    canary_alone: bool = False
    canary_bands: act.Bands | None = None
    last_run: str | None = None  # the latest run id launched (None in state from before run ids had a prefix)
    # How the last canary ended (CanarySuccessful, CanaryFailed, ChecksumMismatch, ...) and why:
    # status keeps saying so until the next canary, long after the one-pass Promoted/RolledBack.
    last_canary_reason: str | None = None
    last_canary_message: str = ""
    shift_at: float | None = None  # when the current shift began: a run claims the captures since then
    # A candidate was not better while the shift persisted (ShiftPersists): no new run before this time.
    retrain_at: float | None = None
    not_better_runs: int = 0  # "not better" verdicts in a row under the current shift (each doubles the wait)
    recall_run: str | None = None  # the recall evaluation Job running (Recalling)
    recalled_for_shift: float | None = None  # shift_at of the shift the pool was already tried for
    candidate_recalled: bool = False  # the candidate is a pooled version, not a run's output
    # The report's served-draft score, the candidate's baseline (the live number is on other samples).
    candidate_baseline: float | None = None
    # After a recall's promotion: its evaluated length, and since when live acceptance stays short of it.
    recalled_expected: float | None = None
    recall_shortfall_since: float | None = None
    # The shift is a rise of acceptance (a return to a domain the served draft knows better): the pool
    # is tried on it, and nothing is trained whatever the evaluation says (lifecycle_recall.py).
    recall_only: bool = False
    # The fleet held training while a run ran (control/fleet.py): the run was cancelled, its samples are
    # still in the buffer, and the next run launches as soon as training pays, without a new threshold.
    training_preempted: bool = False


@dataclass(frozen=True)
class LifecycleParams:
    capture: CaptureParams = field(default_factory=CaptureParams)
    training: TrainingParams = field(default_factory=TrainingParams)
    canary: CanaryParams = field(default_factory=CanaryParams)
    first_draft: FirstDraftParams = field(default_factory=FirstDraftParams)
    recall: RecallParams = field(default_factory=RecallParams)
    # metadata.uid of the TideDeployment: its run ids start with a hash of it, so a TideDeployment
    # recreated under the same name never reuses an old run's Job name or candidates/<run id>.
    deployment_uid: str = ""


@dataclass(frozen=True)
class Step:
    actions: tuple[act.Action, ...]
    state: LifecycleState
    reason: str
    message: str


RUN_PREFIX_LENGTH = 8


def run_id_for(counter: int, deployment_uid: str = "") -> str:
    """Run ids are deterministic: the trainer Job name and candidates/<run id> derive from them.

    ``<hash of the TideDeployment's UID>-r<counter>`` ("3fa9c2d1-r7"): a TideDeployment deleted and
    recreated under the same name starts its counter again, but under a new hash. Without a UID
    (state from before, tests of the pure logic) the id is the old ``r<counter>``.
    """
    if not deployment_uid:
        return f"r{counter}"
    return f"{hashlib.sha256(deployment_uid.encode()).hexdigest()[:RUN_PREFIX_LENGTH]}-r{counter}"


def run_number(run_id: str) -> int | None:
    """The counter of a run id of either form ("r7", "3fa9c2d1-r7"), None for another id (a seed)."""
    match = _RUN_NUMBER.fullmatch(run_id)
    return int(match.group(1)) if match else None


_RUN_NUMBER = re.compile(rf"(?:[0-9a-f]{{{RUN_PREFIX_LENGTH}}}-)?r([0-9]+)")


def to_phase(state: LifecycleState, phase: Phase, now: float, reason: str, message: str, *, capture: bool) -> Step:
    moved = replace(state, phase=phase, phase_since=now if phase is not state.phase else state.phase_since)
    return stay(moved, reason, message, capture=capture)


def stay(state: LifecycleState, reason: str, message: str, *, capture: bool) -> Step:
    """Keep the phase; emit SetCapture only when the capture setting actually changes."""
    if state.capture_enabled == capture:
        return Step((), state, reason, message)
    changed = replace(state, capture_enabled=capture)
    return Step((act.SetCapture(capture, reason, message),), changed, reason, message)


def with_action(step: Step, action: act.Action) -> Step:
    return Step((*step.actions, action), step.state, step.reason, step.message)
