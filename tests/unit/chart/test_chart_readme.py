"""charts/tide-operator/README.md is generated from values.yaml by hack/chart-readme.py (helm-docs
conventions, stdlib only): it must not drift, and its YAML reader must read the chart as PyYAML does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from chart_render import CHART_DIR

REPO = CHART_DIR.parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "hack" / "chart-readme.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


GEN = _generator()
VALUES = (CHART_DIR / "values.yaml").read_text()


def test_committed_readme_matches_the_generator() -> None:
    expected = GEN.readme(VALUES, (CHART_DIR / "Chart.yaml").read_text())
    assert (CHART_DIR / "README.md").read_text() == expected, (
        "charts/tide-operator/README.md drifted: run `python hack/chart-readme.py`")


def _leaves(values: dict[str, Any], path: str = "") -> list[str]:
    found = []
    for key, value in values.items():
        name = f"{path}.{key}" if path else key
        found += _leaves(value, name) if isinstance(value, dict) and value else [name]
    return found


def test_every_value_has_a_row_and_every_comment_reaches_it() -> None:
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in GEN.readme(
        VALUES, (CHART_DIR / "Chart.yaml").read_text()).splitlines() if line.startswith("| ") and " | " in line}
    missing = [leaf for leaf in _leaves(yaml.safe_load(VALUES)) if leaf not in rows]
    assert not missing  # keys in values.yaml have no dots or slashes, so leaf names are row keys
    for path, doc in GEN.documented(VALUES).items():
        assert doc.description
        assert doc.description.replace("|", "\\|") in rows[".".join(path)]
    assert rows["logFormat"] == ("| logFormat | string | `\"plain\"` | Operator log format: `plain` (timestamped text) "
                                 "or `json` (one JSON object per line, Kopf's JSON format, for log shippers such as "
                                 "Loki, Fluent Bit or Cloud Logging). |")


def test_helm_docs_comment_conventions() -> None:
    text = """\
# -- (list) Allowed prefixes;
# null means the defaults.
prefixes: null
# -- Not attached: a blank line follows.

orphan: 1
# @default -- three classes (see values.yaml)
# -- The classes.
classes:
  - name: a
    # -- not documented: inside a sequence item
    size: 1
nested:
  # -- A nested key.
  leaf: "x"
"""
    docs = GEN.documented(text)
    assert docs == {("prefixes",): GEN.Doc("Allowed prefixes; null means the defaults.", "list"),
                    ("classes",): GEN.Doc("The classes.", None, "three classes (see values.yaml)"),
                    ("nested", "leaf"): GEN.Doc("A nested key.")}
    rows = GEN.rows(yaml.safe_load(text), docs)
    assert rows == ["| prefixes | list | `null` | Allowed prefixes; null means the defaults. |",
                    "| orphan | int | `1` |  |",
                    "| classes | list | three classes (see values.yaml) | The classes. |",
                    '| nested.leaf | string | `"x"` | A nested key. |']


def test_check_mode_reports_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "README.md"
    stale.write_text("old\n")
    monkeypatch.setattr(GEN, "README", stale)
    assert GEN.main(["--check"]) == 1
    assert GEN.main([]) == 0
    assert GEN.main(["--check"]) == 0


def test_a_long_list_default_is_summarised_by_its_item_names() -> None:
    classes = [{"name": n, "nodeLabels": [{"key": "nvidia.com/gpu.product", "values": [n]}]} for n in "ABCD"]
    assert GEN.shown_default(classes) == "4 entries: A, B, C, D (see values.yaml)"
    assert GEN.shown_default(["x"]) == '`["x"]`'
