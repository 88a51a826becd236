"""The chart's logFormat value reaches the operator's --log-format, within the choices the operator takes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chart_render import CHART_DIR, chart, only, render

from tide_operator.__main__ import LOG_FORMATS, parse_args

helm_python = pytest.importorskip("helm_python")


def _args(values: dict[str, Any]) -> list[str]:
    return only(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(("values", "expected"), [({}, "plain"), ({"logFormat": "json"}, "json")])
def test_log_format_reaches_the_operator_args(values: dict[str, Any], expected: str) -> None:
    args = _args(values)
    assert f"--log-format={expected}" in args
    assert parse_args(args).log_format == expected  # the operator accepts what the chart renders


def test_the_schema_offers_exactly_the_operators_log_formats() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert sorted(schema["properties"]["logFormat"]["enum"]) == sorted(LOG_FORMATS)


def test_the_schema_refuses_an_unknown_log_format_naming_the_value() -> None:
    with pytest.raises(helm_python.HelmError) as err:
        chart().validate_schema({"logFormat": "xml"})
    assert "logFormat" in str(err.value)
