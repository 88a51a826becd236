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
    """A vLLM deployment whose speculative draft is kept aligned with live traffic."""

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
    draft: DraftSpec = Field(default_factory=DraftSpec)
    inference: InferenceSpec = Field(default_factory=InferenceSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    control: ControlSpec = Field(default_factory=ControlSpec)
    storage: StorageSpec
    prometheus: PrometheusSpec = Field(default_factory=PrometheusSpec)
