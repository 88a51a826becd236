"""The chart's values.schema.json: hand-written except `config`, which comes from OperatorConfig.

`python tests/unit/chart/values_schema.py --write` refreshes the `config` part (and its `$defs`) after
tide_operator.config changes; test_chart_schema.py fails until then.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "charts" / "tide-operator" / "values.schema.json"


def _without_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_titles(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def config_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema of values.config, its $defs) from the operator's config model."""
    from tide_operator.config import OperatorConfig

    schema = _without_titles(OperatorConfig.model_json_schema(by_alias=True, mode="validation"))
    defs = schema.pop("$defs")
    return schema, defs


def refreshed(current: dict[str, Any]) -> dict[str, Any]:
    config, defs = config_schema()
    return {**current, "$defs": defs, "properties": {**current["properties"], "config": config}}


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        SCHEMA_PATH.write_text(json.dumps(refreshed(json.loads(SCHEMA_PATH.read_text())), indent=2) + "\n")
