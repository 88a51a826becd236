from __future__ import annotations

import json
from datetime import UTC, datetime

import jsonschema
from crd_harness import resource_schema

from tide_operator.api.conditions import ConditionType, Reason, set_condition
from tide_operator.api.status import (
    Decision,
    DraftStatus,
    InferencePoolStatus,
    Phase,
    SpeculationStatus,
    TideDeploymentStatus,
    TrainingPoolStatus,
)
from tide_operator.manifests.labels import serving_selector


def _status() -> TideDeploymentStatus:
    conditions, _ = set_condition(
        (),
        ConditionType.READY,
        "True",
        reason=Reason.REPLICAS_READY,
        message="2/2",
        generation=3,
        now=datetime(2026, 12, 2, tzinfo=UTC),
    )
    return TideDeploymentStatus(
        phase=Phase.CANARY,
        observed_generation=3,
        conditions=conditions,
        inference_pool=InferencePoolStatus(gpu_class="H100", nodes=2, replicas=2, replicas_ready=2),
        training_pool=TrainingPoolStatus(gpu_class="MI250", nodes=1),
        draft=DraftStatus(current="v3", candidate="v4", served_revision="5f1c0e2"),
        speculation=SpeculationStatus(
            enabled=True, num_speculative_tokens=3, modelled_speedup_percent=142, acceptance_length_milli=2340,
            acceptance_length=2.34,
        ),
        last_decision=Decision(time="2026-12-02T00:00:00Z", action="StartCanary", reason="CandidateBeatsServed"),
        selector=serving_selector("chat"),
        replicas=2,
    )


def test_status_wire_form_is_camel_case_and_round_trips() -> None:
    wire = _status().to_wire()
    assert wire["inferencePool"] == {"gpuClass": "H100", "nodes": 2, "replicas": 2, "replicasReady": 2}
    assert wire["speculation"]["acceptanceLengthMilli"] == 2340
    assert wire["speculation"]["acceptanceLength"] == 2.34
    assert wire["conditions"][0]["lastTransitionTime"] == "2026-12-02T00:00:00Z"
    assert TideDeploymentStatus.model_validate_json(json.dumps(wire)) == _status()


def test_status_wire_form_validates_against_the_crd() -> None:
    jsonschema.validate(_status().to_wire(), resource_schema()["properties"]["status"])


def test_acceptance_length_is_a_number_that_reads_back_whole_values() -> None:
    """The API server writes 3.0 back as 3 (Go's JSON): the status must still parse on the next pass."""
    speculation = resource_schema()["properties"]["status"]["properties"]["speculation"]["properties"]
    assert speculation["acceptanceLength"]["type"] == "number"
    wire = _status().to_wire()
    wire["speculation"]["acceptanceLength"] = 3
    assert TideDeploymentStatus.model_validate_json(json.dumps(wire)).speculation.acceptance_length == 3.0


def test_phase_covers_the_loop() -> None:
    assert [phase.value for phase in Phase] == [
        "Pending",
        "Serving",
        "Collecting",
        "Recalling",
        "Training",
        "Evaluating",
        "Canary",
        "Degraded",
        "Invalid",
    ]


def test_selector_is_a_label_selector_string() -> None:
    assert serving_selector("chat") == "app.kubernetes.io/component=inference,tide.dev/deployment=chat"
