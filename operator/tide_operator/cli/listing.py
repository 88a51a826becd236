"""`tide get`: TideDeployments as a table, like `kubectl get`, and the machine-readable outputs.

The columns read the status the operator writes (api/status.py); a field it has not written yet shows
as `-`, never as a made-up zero. `-o wide` adds the pools and the candidate.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import yaml

from tide_operator.cli.status import age, table

COLUMNS = ("NAME", "READY", "PHASE", "DRAFT", "SPECULATION", "ACCEPTANCE", "AGE")
WIDE = ("INFERENCE", "TRAINING", "CANDIDATE")


def _ready(status: dict[str, Any]) -> str:
    pool = status.get("inferencePool") or {}
    if "replicas" not in pool:
        return "-"
    return f"{pool.get('replicasReady', 0)}/{pool['replicas']}"


def _speculation(status: dict[str, Any]) -> str:
    speculation = status.get("speculation") or {}
    if "enabled" not in speculation:
        return "-"
    return f"on (g={speculation.get('numSpeculativeTokens', '?')})" if speculation["enabled"] else "off"


def _acceptance(status: dict[str, Any]) -> str:
    milli = (status.get("speculation") or {}).get("acceptanceLengthMilli")
    return "-" if milli is None else f"{milli / 1000:.2f}"


def row(obj: dict[str, Any], now: datetime, *, wide: bool = False, namespace: bool = False) -> list[str]:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    draft = status.get("draft") or {}
    cells = [meta.get("name", ""), _ready(status), status.get("phase") or "-", draft.get("current") or "-",
             _speculation(status), _acceptance(status), age(meta.get("creationTimestamp"), now)]
    if wide:
        cells += [(status.get("inferencePool") or {}).get("gpuClass") or "-",
                  (status.get("trainingPool") or {}).get("gpuClass") or "-", draft.get("candidate") or "-"]
    return ([meta.get("namespace", "")] if namespace else []) + cells


def render_table(objs: Sequence[dict[str, Any]], now: datetime, *, wide: bool = False,
                 namespace: bool = False, header: bool = True) -> str:
    """Columns padded to the widest cell, as kubectl prints them."""
    head = (["NAMESPACE"] if namespace else []) + list(COLUMNS) + (list(WIDE) if wide else [])
    rows = ([head] if header else []) + [row(obj, now, wide=wide, namespace=namespace) for obj in objs]
    return "".join(line + "\n" for line in table(rows, indent="")) if rows else ""


def render_document(doc: Any, output: str) -> str:
    """``json`` or ``yaml`` of an object or a list, as kubectl would print it."""
    if output == "json":
        return json.dumps(doc, indent=2, sort_keys=False) + "\n"
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))


def as_list(objs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``List`` kubectl prints for ``get -o json|yaml`` over several objects."""
    return {"apiVersion": "v1", "kind": "List", "items": list(objs), "metadata": {"resourceVersion": ""}}
