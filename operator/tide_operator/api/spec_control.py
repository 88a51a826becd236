"""Knobs of the adaptive control loop (``spec.control``), all with documented defaults.

Percentages and permille stand in for fractions (no floats in a Kubernetes spec); durations are
strings read through ``tide_operator.api.units.duration_seconds``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from tide_operator.api.base import ApiModel, DnsSubdomain, cel_validations
from tide_operator.api.units import ByteQuantity, Duration

Percent = Annotated[int, Field(ge=0, le=100)]


class SpeculationMode(StrEnum):
    ADAPTIVE = "Adaptive"  # on while the modelled speedup at the observed batch size pays
    ON = "On"
    OFF = "Off"


class ServerSideEncryption(StrEnum):
    NONE = "None"
    AES256 = "AES256"
    AWS_KMS = "aws:kms"


class DecisionSpec(ApiModel):
    """When speculation is switched (Adaptive mode)."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {"rule": "duration(self.probeInterval) == duration('0s') || (duration(self.probeInterval) >= "
                     "duration('1m') && duration(self.probeInterval) <= duration('24h'))",
             "message": "probeInterval must be 0s (no probes) or from 1m to 24h"},
        )
    )

    speedup_margin_percent: Percent = 5
    """Turn on only when the modelled speedup exceeds 1 + margin."""
    hysteresis_percent: Percent = 3
    """Turn off only when the modelled speedup falls below 1 + margin - hysteresis."""
    min_dwell: Duration = "2m"
    """Minimum time between two switches (a probe is the exception: it lasts one rate window)."""
    probe_interval: Duration = "10m"
    """While the served draft goes unmeasured (speculation off, or g=0 at the load), speculate for one
    Prometheus rate window to measure it again: first after probeInterval/8 of silence, doubling after
    each probe that finds it still not paying, up to probeInterval; 0s: never. 0s or 1m to 24h."""


class DriftSpec(ApiModel):
    """Drift detector: short and long exponential moving averages of the acceptance rate."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {"rule": "duration(self.shortHalfLife) > duration('0s')", "message": "shortHalfLife must be above 0s"},
        )
    )

    short_half_life: Duration = "2m"
    """Half-life of the short average; above 0s (a zero half-life has no average)."""
    long_half_life: Duration = "30m"
    """Half-life of the long average, the baseline a shift is measured against; longer than shortHalfLife."""
    threshold_percent: int = Field(default=5, ge=1, le=99)
    """A shift is short < long * (1 - threshold / 100): 100 would need an acceptance below zero."""
    min_samples: int = Field(default=200, ge=1, le=1_000_000_000)
    """Drafted tokens observed before the detector may fire."""


class ConfigMapKeyRef(ApiModel):
    """A key of a ConfigMap in the TideDeployment's namespace."""

    name: DnsSubdomain
    """Name of the ConfigMap."""
    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
    """Key of the ConfigMap's data whose value is read."""


class CostPoint(ApiModel):
    """Measured step costs at one batch size."""

    batch_size: int = Field(ge=1, le=65536)
    """Batch size (running sequences per engine) at which the costs were measured; one point per value."""
    draft_cost_permille: int = Field(ge=0, le=100_000)
    """c(b): one draft step as a fraction of one target step, in permille."""
    verify_cost_percent: int = Field(ge=100, le=10_000)
    """beta(b): one verification step as a fraction of one target decode step, in percent; at least
    100 (verifying the drafted tokens costs at least the one decode step it replaces)."""


class CostProfileSpec(ApiModel):
    """The cost model's c(b) and beta(b): a ConfigMap reference or inline points, not both."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {
                "rule": "has(self.configMapRef) != has(self.points)",
                "message": "set exactly one of configMapRef and points",
            }
        )
    )

    config_map_ref: ConfigMapKeyRef | None = None
    """ConfigMap in this namespace whose key holds the profile as JSON, {"points": [...]} with the
    fields and bounds of ``points`` (docs/operating.md); read every pass, missing or bad: Invalid."""
    points: tuple[CostPoint, ...] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["batchSize"]},
    )
    """Inline cost points, 1 to 64, one per batchSize (as ``tide calibrate`` measures them)."""


class CaptureSpec(ApiModel):
    """Capture of target hidden states (derived from user prompts: bounded and encryptable)."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {
                "rule": "self.serverSideEncryption == 'aws:kms' || !has(self.kmsKeyId)",
                "message": "kmsKeyId needs serverSideEncryption aws:kms",
            }
        )
    )

    enabled: bool = True
    """Off: never capture, so no new draft is trained."""
    sampling_percent: int = Field(default=100, ge=1, le=100)
    """Share of requests captured while collecting."""
    max_buffer_samples: int = Field(default=4096, ge=1, le=100_000_000)
    """Cap on captured samples kept in S3: past it the oldest shards are deleted (never ones a running
    trainer has claimed); at least training.sampleThreshold."""
    max_buffer_bytes: ByteQuantity = "2Gi"
    """Cap on the bytes of captures kept in S3 (a quantity: 512Mi, 2Gi); past it the oldest shards go."""
    retention: Duration = "24h"
    """Captures older than this are dropped."""
    server_side_encryption: ServerSideEncryption = ServerSideEncryption.NONE
    """S3 server-side encryption of every object written (captures by the pods, drafts, manifests):
    None (the bucket's default), AES256 or aws:kms."""
    kms_key_id: Annotated[str, StringConstraints(min_length=1, max_length=2048)] | None = None
    """KMS key (id or ARN) for aws:kms; default: the bucket's AWS-managed key. Needs
    storage.s3.credentialsSecret (the operator's own identity uses no key of a spec's choosing)."""


class TrainingControlSpec(ApiModel):
    """When trainer Jobs start, and how long one may run."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {"rule": "!has(self.timeout) || duration(self.timeout) >= duration('10s')",
             "message": "training.timeout must be at least 10s"},
        )
    )

    sample_threshold: int = Field(default=2048, ge=1, le=100_000_000)
    """New captured samples needed to start training."""
    backoff: Duration = "10m"
    """Wait after a failed training run."""
    max_failures: int = Field(default=3, ge=0, le=100)
    """Consecutive failures before training stops and the deployment reports Degraded."""
    timeout: Duration | None = None
    """activeDeadlineSeconds of each trainer Job (a run past it is a failed run, and its claim on
    the capture shards ends). Default: three times the expected run time (the window's samples at
    the trainer's measured throughput), bounded to [10m, 24h]."""


class CanarySpec(ApiModel):
    """Live comparison of a candidate draft on part of the fleet (Argo Rollouts vocabulary)."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {"rule": "duration(self.analysisWindow) > duration('0s')", "message": "analysisWindow must be above 0s"},
        )
    )

    replicas: int = Field(default=1, ge=1, le=64)
    """vLLM pods that serve the candidate during a canary (the first ready pods by name); the others are
    the control. Fewer than inference.replicas when that is above 1."""
    analysis_window: Duration = "5m"
    """How long the canary is measured against the control pods; above 0s."""
    min_acceptance_length_gain_percent: int = Field(default=2, ge=0, le=1000)
    """The smallest acceptance-length gain (or loss) a canary measurement counts: the floor of its noise band."""
    max_throughput_loss_percent: Percent = 5
    """Failure: canary generation throughput below control by more than this (and than the measured noise)."""
    failure_limit: int = Field(default=0, ge=0, le=10)
    """Failed measurements tolerated; one more fails the analysis and rolls back (inconclusive also does)."""
    consecutive_success_limit: int = Field(default=3, ge=0, le=100)
    """Successful measurements in a row that promote before the window ends (0: wait for the window)."""
    min_promotion_interval: Duration = "10m"
    """At most one promotion per interval: the canary already guards quality, this only limits churn."""


class DraftPoolSpec(ApiModel):
    """Promoted drafts kept recallable per domain (the registry's pool.json index)."""

    max_drafts: int = Field(default=4, ge=1, le=64)
    """Drafts the pool's index keeps; the least recently served leaves first (its drafts/vN stays in the
    registry), the pinned draft never leaves. A new target revision or tokenizer empties the pool."""
    recall: bool = True
    """On a drift, score the pool's other drafts on the new traffic (an evaluation Job on the training
    pool) before training; the best one that beats the served draft by canary.minAcceptanceLengthGainPercent
    goes to the canary as it is, and training starts only when none does."""
    recall_sample_threshold: int = Field(default=256, ge=16, le=1_000_000)
    """Samples captured since the drift that the evaluation scores the pool on."""


class ControlSpec(ApiModel):
    """The adaptive loop: speculate, detect drift, collect, train, canary, promote or roll back."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {"rule": "duration(self.interval) >= duration('5s')", "message": "interval must be at least 5s"},
            {
                "rule": "duration(self.drift.shortHalfLife) < duration(self.drift.longHalfLife)",
                "message": "drift.shortHalfLife must be shorter than drift.longHalfLife",
            },
            {
                "rule": "self.training.sampleThreshold <= self.capture.maxBufferSamples",
                "message": "training.sampleThreshold must not exceed capture.maxBufferSamples",
            },
        )
    )

    speculation: SpeculationMode = SpeculationMode.ADAPTIVE
    """Adaptive: speculate while the modelled speedup at the observed batch size exceeds
    1 + decision.speedupMarginPercent (with hysteresis and dwell); On: always, at
    draft.numSpeculativeTokens; Off: never."""
    interval: Duration = "30s"
    """Period of the control loop (metrics query and decision)."""
    paused: bool = False
    """Freeze every decision and actuation; children are still reconciled."""
    draft_pin: Annotated[str, StringConstraints(pattern=r"^v[1-9][0-9]{0,8}$")] | None = None
    """Serve this draft version and neither train nor promote."""
    abort_canary: bool = False
    """Roll back a running canary now."""
    adaptive_speculative_tokens: bool = True
    """Choose the speculative length per batch-size band from the cost model."""
    decision: DecisionSpec = Field(default_factory=DecisionSpec)
    drift: DriftSpec = Field(default_factory=DriftSpec)
    cost_profile: CostProfileSpec | None = None
    """Measured step costs c(b) and beta(b) the speedup model uses, from a ConfigMap or inline points;
    default: the operator's built-in profile."""
    capture: CaptureSpec = Field(default_factory=CaptureSpec)
    training: TrainingControlSpec = Field(default_factory=TrainingControlSpec)
    canary: CanarySpec = Field(default_factory=CanarySpec)
    draft_pool: DraftPoolSpec = Field(default_factory=DraftPoolSpec)
