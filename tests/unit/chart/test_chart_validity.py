"""The chart against Kubernetes' own schemas, its values schema and `helm lint`."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_render import CHART_DIR, EVERYTHING_ON, chart, render

kubernetes_validate = pytest.importorskip("kubernetes_validate")
helm_python = pytest.importorskip("helm_python")

# The oldest Kubernetes the chart supports (CEL in the CRD) and the newest schemas at hand.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
# prometheus-operator kinds are not in Kubernetes' schemas; the chart's tests check their fields.
PROMETHEUS_OPERATOR_GROUP = "monitoring.coreos.com/"
CI_VALUES = sorted((CHART_DIR / "ci").glob("*-values.yaml"))


def _built_in(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if not o["apiVersion"].startswith(PROMETHEUS_OPERATOR_GROUP)]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_name", ["default", "everything-on", *(p.stem for p in CI_VALUES)])
def test_every_built_in_object_validates_against_kubernetes_schemas(values_name: str, kube_version: str) -> None:
    values = _values(values_name)
    for obj in _built_in(render(values)):
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} ({values_name}, {kube_version}): {err.message}")


def _values(name: str) -> dict[str, Any]:
    if name == "default":
        return {}
    if name == "everything-on":
        return EVERYTHING_ON
    return yaml.safe_load((CHART_DIR / "ci" / f"{name}.yaml").read_text()) or {}


def test_values_yaml_and_ci_values_pass_the_schema() -> None:
    chart().validate_schema({})
    chart().validate_schema(EVERYTHING_ON)
    for path in CI_VALUES:
        chart().validate_schema(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize(("values", "named"), [
    ({"metricsPort": "9100"}, "metricsPort"),
    ({"crds": {"enable": True}}, "enable"),
    ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"config": {"resyncIntervalSeconds": 0}}, "resyncIntervalSeconds"),
    ({"config": {"gpuClasses": [{"name": "B200", "vendor": "intel"}]}}, "gpuClasses"),
    ({"watchNamespaces": ["Not_A_Namespace"]}, "watchNamespaces"),
    ({"replicas": 2}, "replicas"),
])
def test_schema_rejects_bad_values_and_names_the_field(values: dict[str, Any], named: str) -> None:
    with pytest.raises(helm_python.HelmError) as err:
        chart().validate_schema(values)
    assert named in str(err.value)


def test_helm_lint_strict_has_no_warnings() -> None:
    for values in ({}, EVERYTHING_ON):
        report = helm_python.lint(str(CHART_DIR), values, strict=True, kube_version="v1.30.0")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems, problems
        assert not report["errors"], report["errors"]


def test_helm_ignores_the_crds_folder_so_the_crd_is_installed_once() -> None:
    # A chart's crds/ folder is installed unconditionally; the CRD template would then collide with it.
    assert chart().crds == []
    assert "files/crds/tidedeployment.yaml" in {f["name"] for f in chart().files}


def test_values_schema_config_part_matches_the_operator_config_model() -> None:
    import json

    from values_schema import SCHEMA_PATH, refreshed

    current = json.loads(SCHEMA_PATH.read_text())
    assert refreshed(current) == current, (
        "values.schema.json's config drifted from tide_operator.config: "
        "run `python tests/unit/chart/values_schema.py --write`")
