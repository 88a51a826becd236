"""Every alert of the chart's PrometheusRule links its runbook: prometheusRule.runbookBaseUrl plus an
anchor that is a heading of docs/runbooks.md."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from chart_render import CHART_DIR, only, render

pytest.importorskip("helm_python")

RUNBOOKS = CHART_DIR.parents[1] / "docs" / "runbooks.md"
DEFAULT_BASE = "https://github.com/tide-operator/tide-operator/blob/main/docs/runbooks.md"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_anchors() -> set[str]:
    return {github_anchor(m) for m in re.findall(r"^#{1,6} (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)}


def _alerts(values: dict[str, Any]) -> list[dict[str, Any]]:
    rule = only(render({"prometheusRule": {"enabled": True, **values}}), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    alerts = _alerts({})
    assert alerts
    anchors = runbook_anchors()
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == DEFAULT_BASE, alert["alert"]
        assert anchor in anchors, f"{alert['alert']}: no heading for #{anchor} in {RUNBOOKS.name}"


def test_the_chart_repository_is_the_default_runbook_home() -> None:
    chart_yaml = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert DEFAULT_BASE.startswith(chart_yaml["home"] + "/")


def test_runbook_base_url_is_a_value() -> None:
    base = "https://wiki.example/tide/runbooks"
    for alert in _alerts({"runbookBaseUrl": base}):
        assert alert["annotations"]["runbook_url"] == f"{base}#{alert['alert'].lower()}"


def test_every_alert_of_the_rules_file_has_a_runbook_section() -> None:
    rules = yaml.safe_load((CHART_DIR / "files" / "alerts" / "tide-rules.yaml").read_text())
    names = {r["alert"].lower() for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert names <= runbook_anchors()
