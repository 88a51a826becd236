"""Every field of spec and status carries a description, so ``kubectl explain`` explains it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crd_harness import resource_schema

_WIRE_ENVELOPE = ("apiVersion", "kind", "metadata")


def field_paths(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of every property below ``node``: nested objects, array items, map values."""
    for name, prop in node.get("properties", {}).items():
        yield f"{path}.{name}", prop
        yield from field_paths(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from field_paths(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from field_paths(node["additionalProperties"], f"{path}{{}}")


def test_the_walk_reaches_array_items_and_nested_objects() -> None:
    paths = {path for path, _ in field_paths(resource_schema(), "")}
    assert ".status.conditions[].reason" in paths
    assert ".spec.control.costProfile.points[].batchSize" in paths
    assert ".spec.inference.tolerations[].key" in paths
    assert ".spec.storage.s3.bucket" in paths


def test_every_spec_and_status_field_has_a_description() -> None:
    undocumented = [
        path
        for path, prop in field_paths(resource_schema(), "")
        if path.lstrip(".").split(".")[0] not in _WIRE_ENVELOPE and not str(prop.get("description", "")).strip()
    ]
    assert not undocumented, f"{len(undocumented)} fields without a description:\n" + "\n".join(undocumented)


def test_the_resource_and_its_spec_are_described_differently() -> None:
    root = resource_schema()
    spec_text = root["properties"]["spec"]["description"]
    assert root["description"].strip()
    assert spec_text.strip()
    assert root["description"] != spec_text
    assert root["properties"]["status"]["description"].strip()
