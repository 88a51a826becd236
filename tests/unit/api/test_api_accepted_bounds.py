"""Specs the CRD used to accept and the control pass could not run (issue 14, item 5).

Each row was accepted by the CRD and raised on every pass; now the API server's verdict (OpenAPI
plus CEL, crd_harness) refuses it and parse_spec names the same field.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.crd_harness import api_server_verdict
from tide_operator.api import SpecError, parse_spec
from tide_operator.control.spec_params import policy_params

BASE: dict[str, Any] = {"target": {"model": "m", "revision": "r1"},
                        "storage": {"s3": {"bucket": "tide", "credentialsSecret": "s3"}}}


def spec_with(section: str, value: dict[str, Any]) -> dict[str, Any]:
    if section == "storage":
        return {**BASE, "storage": {"s3": {**BASE["storage"]["s3"], **value}}}
    return {**BASE, "control": {section: value}}


@pytest.mark.parametrize(("section", "value", "field"), [
    ("canary", {"analysisWindow": "0s"}, "spec.control.canary.analysisWindow"),
    ("canary", {"analysisWindow": "0h0m"}, "spec.control.canary.analysisWindow"),
    ("drift", {"shortHalfLife": "0s"}, "spec.control.drift.shortHalfLife"),
    ("decision", {"probeInterval": "30s"}, "spec.control.decision.probeInterval"),  # one probe after another
    ("decision", {"probeInterval": "24h1s"}, "spec.control.decision.probeInterval"),
    ("drift", {"thresholdPercent": 100}, "spec.control.drift.thresholdPercent"),
    ("costProfile", {"points": [{"batchSize": 1, "draftCostPermille": 200, "verifyCostPercent": 99}]},
     "spec.control.costProfile.points[0].verifyCostPercent"),
    ("storage", {"endpoint": "http://minio_s3:9000"}, "spec.storage.s3.endpoint"),
    ("storage", {"endpoint": "http://minio:99999"}, "spec.storage.s3.endpoint"),
    ("storage", {"endpoint": "https://-minio"}, "spec.storage.s3.endpoint"),
    ("storage", {"region": "0"}, "spec.storage.s3.region"),
    ("storage", {"region": "us-east-"}, "spec.storage.s3.region"),
])
def test_a_spec_the_pass_cannot_run_is_refused_by_the_crd_and_named_by_parse_spec(
        section: str, value: dict[str, Any], field: str) -> None:
    raw = spec_with(section, value)
    assert api_server_verdict(raw), f"the CRD accepts {value}"
    with pytest.raises(SpecError) as refused:
        parse_spec(raw)
    assert refused.value.field == field


@pytest.mark.parametrize(("section", "value"), [
    ("canary", {"analysisWindow": "1s"}),
    ("drift", {"shortHalfLife": "1s", "thresholdPercent": 99}),
    ("decision", {"probeInterval": "0s"}),  # no probes
    ("decision", {"probeInterval": "1m"}),
    ("decision", {"probeInterval": "24h"}),
    ("costProfile", {"points": [{"batchSize": 1, "draftCostPermille": 0, "verifyCostPercent": 100}]}),
    ("storage", {"endpoint": "http://minio.tide-system.svc:9000", "region": "us-east-1"}),
    ("storage", {"endpoint": "https://10.0.0.7/", "region": "auto"}),
])
def test_the_edges_that_still_run_are_accepted(section: str, value: dict[str, Any]) -> None:
    raw = spec_with(section, value)
    assert api_server_verdict(raw) == []
    policy_params(parse_spec(raw))  # builds every parameter object without raising


def test_cost_points_in_any_order_build_the_profile() -> None:
    points = [{"batchSize": 64, "draftCostPermille": 90, "verifyCostPercent": 150},
              {"batchSize": 1, "draftCostPermille": 200, "verifyCostPercent": 103}]
    params = policy_params(parse_spec(spec_with("costProfile", {"points": points})))
    assert [p.batch_size for p in params.profile.points] == [1, 64]
