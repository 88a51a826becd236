"""The TideDeployment spec (``parse_spec`` in ``validation`` turns raw YAML into one)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from tide_operator.api.base import ApiModel, cel_validations
from tide_operator.api.spec_control import ControlSpec
from tide_operator.api.spec_workload import (
    DraftSpec,
    InferenceSpec,
    PrometheusSpec,
    StorageSpec,
    TargetSpec,
    TrainingSpec,
)


class TideDeploymentSpec(ApiModel):
    """Desired state: the target model and its draft, where vLLM serves and the trainer runs, the
    control loop's knobs, the S3 bucket of captures and drafts, and the Prometheus to read."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {
                "rule": "self.inference.gpusPerReplica % self.target.tensorParallelSize == 0",
                "message": "target.tensorParallelSize must divide inference.gpusPerReplica",
            },
            {
                "rule": ("self.inference.replicas <= 1 || self.control.canary.replicas < self.inference.replicas"),
                "message": "control.canary.replicas must be fewer than inference.replicas",
            },
        )
    )

    target: TargetSpec
    """The model vLLM serves (required); drafts are pinned to its revision and tokenizer."""
    draft: DraftSpec = Field(default_factory=DraftSpec)
    """The speculative draft head: method, the draft to start with, tokens proposed per step."""
    inference: InferenceSpec = Field(default_factory=InferenceSpec)
    """The vLLM pods on the inference pool: replicas, GPUs, image, scheduling, extra arguments."""
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """The trainer Jobs on the training pool: GPUs per Job, image, scheduling."""
    control: ControlSpec = Field(default_factory=ControlSpec)
    """The adaptive loop's knobs (every one has a default): speculation, drift, capture, training, canary."""
    storage: StorageSpec
    """Where captures and drafts live (required): an S3 or S3-compatible bucket."""
    prometheus: PrometheusSpec = Field(default_factory=PrometheusSpec)
    """The Prometheus the control loop reads vLLM's metrics from; default from the operator configuration."""
