"""Small builders for Grafana dashboard JSON (schemaVersion 39, Grafana 10/11).

Plain dicts rather than an SDK: the dashboards use a handful of panel types, and the JSON they
produce is committed and diffed, so its shape should be obvious from this file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 39
GRID_COLUMNS = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    field_config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


def _target_json(target: Target, index: int) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": target.expr, "legendFormat": target.legend or "__auto",
            "refId": chr(ord("A") + index), "range": True}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults = {"unit": panel.unit, **panel.field_config}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": panel.options,
        "targets": [_target_json(t, i) for i, t in enumerate(panel.targets)],
    }


def layout(rows: tuple[Row, ...]) -> list[dict[str, Any]]:
    """Rows of panels flowed left to right on Grafana's 24-column grid, ids in reading order."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row in rows:
        panels.append({"id": len(panels) + 1, "type": "row", "title": row.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y}, "panels": []})
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_COLUMNS:
                x, y, line_height = 0, y + line_height, 0
            panels.append(_panel_json(panel, len(panels) + 1, x, y))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return panels


def query_variable(name: str, label: str, query: str, *, multi: bool) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "query", "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"}, "definition": query,
        "refresh": 2, "sort": 1, "multi": multi, "includeAll": multi,
        "current": {}, "options": [], "hide": 0,
    }


def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {}, "options": [], "hide": 0, "refresh": 1}


def annotation(name: str, expr: str, color: str, title: str, text: str) -> dict[str, Any]:
    """A Prometheus annotation: an event wherever ``expr`` has a value."""
    return {"name": name, "datasource": DATASOURCE, "enable": True, "iconColor": color, "expr": expr,
            "step": "1m", "titleFormat": title, "textFormat": text, "useValueForTime": False,
            "tagKeys": "action,reason"}


def dashboard(uid: str, title: str, description: str, *, rows: tuple[Row, ...],
              variables: list[dict[str, Any]], annotations: list[dict[str, Any]]) -> dict[str, Any]:
    builtin = {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
               "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
               "type": "dashboard"}
    return {
        "id": None, "uid": uid, "title": title, "description": description,
        "tags": ["tide", "vllm", "speculative-decoding"], "timezone": "browser",
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1,
        "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables},
        "annotations": {"list": [builtin, *annotations]},
        "panels": layout(rows),
    }
