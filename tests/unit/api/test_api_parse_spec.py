from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from spec_examples import CASES, MINIMAL, with_fields

from tide_operator.api import SpecError, TideDeploymentSpec, parse_spec
from tide_operator.api.spec_control import SpeculationMode
from tide_operator.api.spec_workload import DraftMethod
from tide_operator.api.units import duration_seconds, quantity_bytes
from tide_operator.catalog import DEFAULT_CATALOG

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("spec", "field"), [pytest.param(spec, field, id=case) for case, spec, field in CASES])
def test_parse_spec_accepts_or_names_the_field(spec: dict, field: str | None) -> None:
    if field is None:
        assert isinstance(parse_spec(spec), TideDeploymentSpec)
        return
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert caught.value.message


def test_defaults_are_the_documented_ones() -> None:
    spec = parse_spec(MINIMAL)
    control = spec.control
    assert control.speculation is SpeculationMode.ADAPTIVE
    assert duration_seconds(control.interval) == 30
    assert (control.paused, control.abort_canary, control.draft_pin) == (False, False, None)
    assert control.adaptive_speculative_tokens is True
    assert (control.decision.speedup_margin_percent, control.decision.hysteresis_percent) == (5, 3)
    assert duration_seconds(control.decision.min_dwell) == 120
    assert duration_seconds(control.drift.short_half_life) == 120
    assert duration_seconds(control.drift.long_half_life) == 1800
    assert (control.drift.threshold_percent, control.drift.min_samples) == (5, 200)
    assert control.cost_profile is None
    assert control.capture.enabled
    assert control.capture.sampling_percent == 100
    assert control.capture.max_buffer_samples == 4096
    assert quantity_bytes(control.capture.max_buffer_bytes) == 2 * 2**30
    assert duration_seconds(control.capture.retention) == 24 * 3600
    assert control.capture.server_side_encryption.value == "None"
    assert (control.training.sample_threshold, control.training.max_failures) == (2048, 3)
    assert duration_seconds(control.training.backoff) == 600
    canary = control.canary
    assert (
        canary.replicas,
        canary.min_acceptance_length_gain_percent,
        canary.max_throughput_loss_percent,
    ) == (1, 2, 5)
    assert canary.failure_limit == 0
    assert duration_seconds(canary.analysis_window) == 300
    assert duration_seconds(canary.min_promotion_interval) == 600
    assert control.draft_pool.max_drafts == 4
    assert spec.draft.method is DraftMethod.EAGLE3
    assert spec.draft.num_speculative_tokens == 3
    assert (spec.inference.replicas, spec.inference.gpus_per_replica, spec.inference.port) == (1, 1, 8000)
    assert spec.storage.s3.delete_artifacts_on_delete is False
    assert spec.target.tensor_parallel_size == 1


def test_parse_spec_reports_every_problem_first_one_in_the_message() -> None:
    spec = with_fields(inference__replicas=99, control__interval="soon")
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    fields = [field for field, _ in caught.value.problems]
    assert fields == ["spec.inference.replicas", "spec.control.interval"]
    assert caught.value.field == "spec.inference.replicas"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (with_fields(inference__replicas=65), "must be between 0 and 64"),
        (with_fields(inference__replicas="2"), "must be an integer"),
        (with_fields(control__speculation="Maybe"), "must be one of Adaptive, On, Off"),
        (with_fields(control__interval="1d"), "must be a duration like 30s, 5m or 1h30m"),
        (with_fields(inference__extraArgs=["--port=1"]), "'--port=1' sets --port, which the operator owns"),
        (with_fields(inference__bogus=1), "is not a field of this object"),
        (with_fields(target={"model": "m"}), "is required"),
    ],
)
def test_messages_read_like_kubernetes(spec: dict, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert caught.value.message == message


def test_gpu_classes_are_checked_against_the_catalog_when_given() -> None:
    spec = with_fields(inference__gpuClasses=["H100", "B300"])
    assert parse_spec(spec).inference.gpu_classes == ("H100", "B300")  # no catalog: schema only
    with pytest.raises(SpecError) as caught:
        parse_spec(spec, known_gpu_classes=DEFAULT_CATALOG.names())
    assert caught.value.field == "spec.inference.gpuClasses"
    assert "'B300'" in caught.value.message


def test_gpu_classes_may_not_repeat() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(with_fields(training__gpuClasses=["MI250", "MI250"]))
    assert caught.value.field == "spec.training.gpuClasses"


@pytest.mark.parametrize("raw", [None, [], "spec", {"target": {1, 2}}])
def test_non_objects_are_refused(raw: object) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(raw)
    assert caught.value.field == "spec"


def test_spec_is_frozen_and_round_trips() -> None:
    spec = parse_spec(
        with_fields(
            control__costProfile={"points": [{"batchSize": 8, "draftCostPermille": 40, "verifyCostPercent": 120}]}
        )
    )
    with pytest.raises(ValueError, match="frozen"):
        spec.inference.replicas = 3  # type: ignore[misc]
    assert parse_spec(spec.to_wire()) == spec


def test_example_manifest_is_valid() -> None:
    document = yaml.safe_load((REPO / "examples" / "tidedeployment.yaml").read_text())
    assert (document["apiVersion"], document["kind"]) == ("tide.dev/v1alpha1", "TideDeployment")
    spec = parse_spec(document["spec"], known_gpu_classes=DEFAULT_CATALOG.names())
    assert spec.inference.gpu_classes == ("H200", "H100")
    assert spec.draft.initial == "s3://drafts/llama-3.3-70b/eagle3-base"
    assert spec.control.cost_profile is not None
    assert len(spec.control.cost_profile.points or ()) == 3
