"""`tide get`: kubectl-style rows from the status, `-o wide`, and json/yaml documents."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import yaml
from cli_fakes import tide_deployment

from tide_operator.cli.listing import as_list, render_document, render_table

NOW = datetime(2025, 12, 2, 13, 0, tzinfo=UTC)


def _obj(name: str = "chat", **status: object) -> dict:
    obj = tide_deployment(**status)
    obj["metadata"].update(name=name, creationTimestamp="2025-12-02T10:00:00Z")
    return obj


def test_rows_read_the_status() -> None:
    lines = render_table([_obj()], NOW).splitlines()
    assert lines[0].split() == ["NAME", "READY", "PHASE", "DRAFT", "SPECULATION", "ACCEPTANCE", "AGE"]
    assert lines[1].split() == ["chat", "2/2", "Training", "v3", "on", "(g=3)", "2.34", "3h"]


def test_a_fresh_object_shows_dashes_not_zeros() -> None:
    fresh = {"metadata": {"name": "new", "namespace": "llm", "creationTimestamp": "2025-12-02T12:59:30Z"}}
    assert render_table([fresh], NOW).splitlines()[1].split() == ["new", "-", "-", "-", "-", "-", "30s"]


def test_wide_and_all_namespaces_add_columns() -> None:
    off = _obj("code", speculation={"enabled": False})
    lines = render_table([_obj(), off], NOW, wide=True, namespace=True).splitlines()
    assert lines[0].split()[0] == "NAMESPACE"
    assert lines[0].split()[-3:] == ["INFERENCE", "TRAINING", "CANDIDATE"]
    assert lines[1].split()[-3:] == ["H100", "MI250", "r7"]
    assert "off" in lines[2].split()


def test_columns_line_up() -> None:
    header, short, long = render_table([_obj("a"), _obj("a-much-longer-name")], NOW).splitlines()
    assert short.index("2/2") == long.index("2/2") == header.index("READY")
    assert short.index("Training") == long.index("Training") == header.index("PHASE")


def test_documents_are_the_whole_object() -> None:
    objs = [_obj("a"), _obj("b")]
    listed = json.loads(render_document(as_list(objs), "json"))
    assert listed["kind"] == "List"
    assert [o["metadata"]["name"] for o in listed["items"]] == ["a", "b"]
    one = yaml.safe_load(render_document(objs[0], "yaml"))
    assert one["status"]["draft"]["current"] == "v3"
    assert one["kind"] == "TideDeployment"
