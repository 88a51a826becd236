from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tide_operator.observability.dashboards import DASHBOARDS, OUT_DIR, render
from tide_operator.observability.grafana import GRID_COLUMNS

PROMTOOL = shutil.which("promtool")


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_committed_dashboard_matches_the_generator(name: str) -> None:
    path = OUT_DIR / f"{name}.json"
    assert path.read_text() == render(DASHBOARDS[name]), (
        f"{path} drifted: regenerate with `python -m tide_operator.observability.dashboards`")


def _dashboards() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(OUT_DIR.glob("*.json"))]


def _targets(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for p in board["panels"] for t in p.get("targets", [])]


def test_dashboard_json_model_basics() -> None:
    for board in _dashboards():
        assert board["id"] is None
        assert board["uid"]
        assert board["schemaVersion"] >= 36
        assert {v["name"] for v in board["templating"]["list"]} >= {"datasource", "namespace", "deployment"}
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for panel in board["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] >= 0, panel["title"]
            assert grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}"
                assert panel["targets"], panel["title"]
        refs = [(p["id"], t["refId"]) for p in board["panels"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs))


def test_panels_do_not_overlap() -> None:
    for board in _dashboards():
        cells: set[tuple[int, int]] = set()
        for panel in board["panels"]:
            g = panel["gridPos"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & mine, f"{panel['title']} overlaps another panel"
            cells |= mine


def test_dashboard_covers_what_users_asked_for() -> None:
    board = _dashboards()[0]
    exprs = " ".join(t["expr"] for t in _targets(board))
    for series in ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "tide_speculation_enabled",
                   "tide_operator_modelled_speedup_ratio", "vllm:num_requests_running", "tide_capture_tokens_total",
                   "tide_operator_training_jobs_total", "tide_draft_info"):
        assert series in exprs
    names = {a["name"] for a in board["annotations"]["list"]}
    assert {"Promotions", "Rollbacks"} <= names


def _as_promql(expr: str) -> str:
    """Grafana's variables replaced by values PromQL accepts."""
    expr = expr.replace("$__rate_interval", "2m").replace("$__range", "1h")
    return re.sub(r"\$\{?(\w+)\}?", "x", expr)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    exprs = [t["expr"] for board in _dashboards() for t in _targets(board)]
    exprs += [a["expr"] for board in _dashboards() for a in board["annotations"]["list"] if "expr" in a]
    rules = {"groups": [{"name": "dashboard-queries",
                         "rules": [{"record": f"tide:query_{i}", "expr": _as_promql(e)} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    check = subprocess.run([PROMTOOL, "check", "rules", str(path)],
                           check=False, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def _metric(query: str) -> str:
    match = re.fullmatch(r"label_values\((\w+)(\{[^}]*\})?, \w+\)", query)
    assert match, query
    return match.group(1)


def test_namespace_and_deployment_variables_list_pods_that_serve_no_draft() -> None:
    """The variables read a series every serving pod exposes on every scrape, also with no draft
    loaded (a bootstrap, a failed load): the plugin's info metric, not tide_draft_info."""
    from types import SimpleNamespace

    from tide_contracts import serving_control as sc
    from tide_serving.serving_metrics import ServingCollector

    no_draft = SimpleNamespace(
        model_name="chat", plugin_version="0.1.0", vllm_version="0.11.0", engine_supported=True,
        draft_identity=lambda: None, speculation_enabled=lambda: False, swap_results={}, last_pause_s=0.0,
        capture_snapshot=lambda: sc.CaptureState(enabled=False, sampling_rate=1.0, destination=None,
                                                 counters=sc.CaptureCounters()))
    always = {family.name for family in ServingCollector(no_draft).collect()}  # type: ignore[arg-type]
    board = _dashboards()[0]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for name in ("namespace", "deployment"):
        assert _metric(variables[name]["query"]["query"]) in always, name
    assert "$namespace" in variables["deployment"]["query"]["query"]
