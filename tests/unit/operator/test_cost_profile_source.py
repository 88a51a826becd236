"""spec.control.costProfile.configMapRef is read: the ConfigMap's profile drives the cost model, and a
missing ConfigMap, a missing key or a bad profile is Invalid naming the field, before any write."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tide_operator.adapters.cost_profile_source import FIELD, parse_profile, read_cost_profile, read_group_profiles
from tide_operator.api import SpecError, parse_spec
from tide_operator.config import OperatorConfig
from tide_operator.control.cost_model import CostProfile
from tide_operator.control.spec_params import policy_params
from tide_operator.reconcile import reconcile

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
PROFILE = {"points": [{"batchSize": 64, "draftCostPermille": 90, "verifyCostPercent": 150},
                      {"batchSize": 1, "draftCostPermille": 200, "verifyCostPercent": 103}]}
RAW = {"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide", "credentialsSecret": "s3"}},
       "control": {"costProfile": {"configMapRef": {"name": "h100-profile", "key": "profile.json"}}}}


class ConfigMaps:
    """Only ConfigMaps; any other call fails the test (an Invalid pass writes nothing)."""

    def __init__(self, data: dict[str, str] | None) -> None:
        self.data = data
        self.writes: list[Any] = []

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "ConfigMap" and name == "h100-profile" and self.data is not None:
            return {"metadata": {"name": name, "namespace": namespace}, "data": self.data}
        return None

    def secret_exists(self, namespace: str, name: str) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the pass called cluster.{name}")


def test_the_configmaps_profile_replaces_the_built_in_estimate() -> None:
    spec = parse_spec(RAW)
    points = read_cost_profile(spec, "ns", ConfigMaps({"profile.json": json.dumps(PROFILE)}))
    assert points == ((1, 200, 103), (64, 90, 150))  # sorted by batch size
    params = policy_params(spec, points)
    assert params.profile == CostProfile.from_spec_points(points)
    assert params.profile.verify_cost(64, 3) == pytest.approx(1.5)


def test_a_spec_without_a_reference_reads_nothing() -> None:
    spec = parse_spec({**RAW, "control": {}})
    assert read_cost_profile(spec, "ns", ConfigMaps(None)) is None


@pytest.mark.parametrize(("data", "words"), [
    (None, "ConfigMap ns/h100-profile not found"),
    ({"other.json": "{}"}, "has no key 'profile.json'"),
    ({"profile.json": "not json"}, "profile.json"),
    ({"profile.json": json.dumps({"points": []})}, "points"),
    ({"profile.json": json.dumps({"points": [{**PROFILE["points"][0], "verifyCostPercent": 99}]})},
     "points.0.verifyCostPercent"),
    ({"profile.json": json.dumps({"points": PROFILE["points"] * 2})}, "must be unique"),
])
def test_a_missing_or_bad_profile_is_invalid_naming_the_field(data: dict[str, str] | None, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        read_cost_profile(parse_spec(RAW), "ns", ConfigMaps(data))
    assert refused.value.field == FIELD == "spec.control.costProfile.configMapRef"
    assert words in refused.value.message


def test_reconcile_of_a_missing_profile_configmap_is_invalid_and_writes_nothing() -> None:
    body = {"metadata": {"name": "chat", "namespace": "ns", "uid": "u", "generation": 2}, "spec": RAW}
    result = reconcile(body, ConfigMaps(None), OperatorConfig(storage={"allowedEndpoints": []}), adopt=None, now=NOW)
    ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    assert result.status["phase"] == "Invalid"
    assert ready["reason"] == "InvalidSpec"
    assert ready["message"] == f"{FIELD}: ConfigMap ns/h100-profile not found"
    assert result.applied == ()


def test_verify_cost_below_one_step_is_refused_like_the_inline_points() -> None:
    with pytest.raises(ValueError, match="verifyCostPercent"):
        parse_profile(json.dumps({"points": [{"batchSize": 1, "draftCostPermille": 0, "verifyCostPercent": 1}]}))


def test_each_serving_group_reads_its_own_profile_by_class() -> None:
    raw = {"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}},
           "inference": {"servingGroups": [
               {"gpuClass": "H100"},
               {"gpuClass": "MI250", "costProfile": {"configMapRef": {"name": "h100-profile", "key": "mi250"}}},
               {"gpuClass": "H200", "costProfile": {"points": PROFILE["points"]}}]}}
    spec = parse_spec(raw, OperatorConfig().catalog.names())
    profiles = read_group_profiles(spec, "team", ConfigMaps({"mi250": json.dumps(PROFILE)}))
    assert profiles == {"MI250": ((1, 200, 103), (64, 90, 150)), "H200": ((1, 200, 103), (64, 90, 150))}
    with pytest.raises(SpecError) as missing:
        read_group_profiles(spec, "team", ConfigMaps({"other": "{}"}))
    assert missing.value.field == "spec.inference.servingGroups[1].costProfile.configMapRef"
