"""``podTemplateOverride``: merged last into a built pod template.

Rules (strategic-merge-like, without patch directives):
- maps merge key by key, recursively;
- a ``null`` value in the override deletes the key;
- lists whose items all carry ``name`` (containers, env, volumes, ports, volumeMounts) merge item
  by item on ``name``; new names are appended;
- any other list (tolerations, args, command) is replaced whole.
"""

from __future__ import annotations

import copy
from typing import Any


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(item, dict) and "name" in item for item in items)


def _merge_named(base: list[dict[str, Any]], override: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged = [copy.deepcopy(item) for item in base]
    positions = {item["name"]: index for index, item in enumerate(merged)}
    for item in override:
        if item["name"] in positions:
            index = positions[item["name"]]
            merged[index] = merge_override(merged[index], item)
        else:
            merged.append(copy.deepcopy(item))
    return merged


def merge_override(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A new dict: ``base`` with ``override`` merged in (neither input is modified)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        current = merged.get(key)
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(current, dict):
            merged[key] = merge_override(current, value)
        elif isinstance(value, list) and isinstance(current, list) and _named(value) and _named(current):
            merged[key] = _merge_named(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
