"""The control policy's data: one pass's observation, the spec's parameters, and the state it keeps.

Plain frozen dataclasses; the state is stored in status (to_dict/from_dict), so a restarted operator,
the scenarios and the benchmarks resume the same logic. decide() is in control/policy.py, which
re-exports these types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tide_operator.control.canary import CanaryParams, PodGroupMetrics
from tide_operator.control.cost_model import DEFAULT_PROFILE, CostProfile
from tide_operator.control.draft_return import TrafficSignatures
from tide_operator.control.drift import DriftParams, DriftState
from tide_operator.control.lifecycle import (
    CaptureParams,
    LifecycleState,
    RecallObservation,
    RecallParams,
    TrainingObservation,
    TrainingParams,
)
from tide_operator.control.probe import ProbeState
from tide_operator.control.restart import lifecycle_from_dict, lifecycle_to_dict
from tide_operator.control.speculation import DecisionParams, SpeculationMode, SpeculationState

Table = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class Observation:
    """One reconcile pass's view of the world (Prometheus rates over its window, S3, Jobs)."""

    acceptance_rate: float | None = None  # vLLM's accepted / drafted tokens
    acceptance_length: float | None = None  # mean tokens per verify step, bonus included
    per_position_acceptance: tuple[float, ...] = ()
    batch_size: float | None = None  # vllm:num_requests_running per engine
    generation_throughput: float | None = None  # tokens/s
    acceptance_samples: int = 0  # drafted tokens behind the acceptance numbers (0 = no data)
    by_version: Mapping[str, PodGroupMetrics] = field(default_factory=dict)
    buffer_samples: int = 0  # captured since the last training launch
    buffer_since: float | None = None  # that launch (epoch s; 0: none left, every sample counts)
    promoted_version: str | None = None  # the S3 pointer, None if none for this target revision
    training: TrainingObservation | None = None
    canary: PodGroupMetrics | None = None
    control: PodGroupMetrics | None = None
    ready_pods: tuple[str, ...] = ()  # serving pods ready and answering their control routes
    pool: tuple[str, ...] = ()  # the draft pool's drafts of this target other than the served one
    recall: RecallObservation | None = None  # the recall evaluation Job's outcome (Recalling)
    # The newest captures' signature against the drafts' training traffic (read while Collecting after a
    # promotion, draft_return.py); None when not read or not enough captured.
    traffic: TrafficSignatures | None = None
    training_deferred: str | None = None  # the fleet's reason to hold training runs (control/fleet.py)


@dataclass(frozen=True)
class PolicyParams:
    """spec.control, seconds as numbers; field names follow the spec's knobs."""

    target_revision: str
    speculation: SpeculationMode = SpeculationMode.ADAPTIVE
    paused: bool = False
    draft_pin: str | None = None
    abort_canary: bool = False
    adaptive_speculative_tokens: bool = True
    num_speculative_tokens: int = 3
    max_batch_size: int = 256  # the engine's max_num_seqs: the last band of the table
    decision: DecisionParams = field(default_factory=DecisionParams)
    drift: DriftParams = field(default_factory=DriftParams)
    capture: CaptureParams = field(default_factory=CaptureParams)
    training: TrainingParams = field(default_factory=TrainingParams)
    canary: CanaryParams = field(default_factory=CanaryParams)
    recall: RecallParams = field(default_factory=RecallParams)
    profile: CostProfile = DEFAULT_PROFILE
    # Prometheus' rate window (operator config prometheusWindowSeconds): for this long after a
    # promotion the fleet's numbers still mix in the previous draft.
    observation_window_s: float = 60.0
    deployment_uid: str = ""  # metadata.uid: run ids start with a hash of it (lifecycle_types.run_id_for)

    def __post_init__(self) -> None:
        if self.observation_window_s < 0:
            raise ValueError("observation window must be >= 0 seconds")
        if self.num_speculative_tokens < 1:
            raise ValueError("numSpeculativeTokens must be >= 1")
        if self.max_batch_size < 1:
            raise ValueError("maxBatchSize must be >= 1")


@dataclass(frozen=True)
class PolicyState:
    speculation: SpeculationState = field(default_factory=SpeculationState)
    drift: DriftState = field(default_factory=DriftState)
    lifecycle: LifecycleState = field(default_factory=LifecycleState)
    acceptance_estimate: float | None = None  # per-token a of the served draft, last known
    table: Table | None = None  # the applied tokens-per-batch-size table
    table_acceptance: float | None = None  # the a the table was computed for
    shift_active: bool = False  # the drift detector's signal at the last pass (to see it rise)
    rise_active: bool = False  # its rise signal at the last pass (acceptance rose: the traffic changed)
    probe: ProbeState = field(default_factory=ProbeState)
    speculation_reason: str = ""
    speculation_message: str = ""
    lifecycle_reason: str = ""
    lifecycle_message: str = ""

    @property
    def speculating(self) -> bool:
        """What the pods were told: the fleet switch, or on for a probe."""
        return self.speculation.enabled or self.probe.running

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["lifecycle"] = lifecycle_to_dict(self.lifecycle)
        data["table"] = [list(band) for band in self.table] if self.table is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyState:
        fields = dict(data)
        fields["speculation"] = SpeculationState(**fields.get("speculation", {}))
        fields["drift"] = DriftState(**fields.get("drift", {}))
        fields["probe"] = ProbeState(**fields.get("probe", {}))
        fields["lifecycle"] = lifecycle_from_dict(fields.get("lifecycle", {}))
        table = fields.get("table")
        fields["table"] = tuple(tuple(band) for band in table) if table is not None else None
        return cls(**fields)
