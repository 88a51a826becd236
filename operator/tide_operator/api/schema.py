"""Pydantic JSON schema -> Kubernetes structural OpenAPI v3 schema.

Structural means: every node typed (or explicitly int-or-string / preserve-unknown-fields), no
``$ref``, no ``anyOf`` with nulls, never ``properties`` together with ``additionalProperties``.
An object field that is neither required nor optional gets ``default: {}`` so the API server fills
in its nested defaults (the same defaults pydantic applies).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]
_DROPPED = ("title",)
_NULL = {"type": "null"}


def openapi_schema(model: type[BaseModel]) -> Schema:
    """The structural schema of ``model`` with camelCase property names."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _convert(raw, defs)


def _resolve(node: Schema, defs: Schema) -> Schema:
    """Inline a ``$ref``; keys next to it (description, default, a narrower enum) win."""
    if "$ref" not in node:
        return node
    siblings = {key: value for key, value in node.items() if key != "$ref"}
    target = _resolve(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    return {**target, **siblings}


def is_nullable(node: Schema) -> bool:
    return _NULL in node.get("anyOf", ())


def _drop_null(node: Schema, defs: Schema) -> Schema:
    """``X | None`` -> X (absent means unset); ``int | str`` -> int-or-string."""
    if "anyOf" not in node:
        return node
    options = [_resolve(option, defs) for option in node["anyOf"] if option != _NULL]
    rest = {key: value for key, value in node.items() if key != "anyOf"}
    if rest.get("default", 0) is None:
        del rest["default"]
    if len(options) == 1:
        return {**options[0], **rest}
    if sorted(option.get("type", "") for option in options) == ["integer", "string"]:
        return {**rest, "x-kubernetes-int-or-string": True}
    raise ValueError(f"no structural form for anyOf {options}")


def _convert(node: Schema, defs: Schema) -> Schema:
    node = _drop_null(_resolve(node, defs), defs)
    out = {key: value for key, value in node.items() if key not in _DROPPED}
    if isinstance(out.get("description"), str):  # docstring line breaks are layout: kubectl explain rewraps
        out["description"] = " ".join(out["description"].split())
    if out.get("type") == "object":
        _convert_object(out, defs)
    if "items" in out:
        out["items"] = _convert(out["items"], defs)
    return out


def _convert_object(out: Schema, defs: Schema) -> None:
    extra = out.pop("additionalProperties", False)
    if "properties" in out:
        required = set(out.get("required", ()))
        raw_properties = out["properties"]
        out["properties"] = {name: _convert(prop, defs) for name, prop in raw_properties.items()}
        for name, prop in out["properties"].items():
            if _needs_empty_default(name, prop, raw_properties[name], required):
                prop["default"] = {}
    elif extra is True or extra == {}:
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(extra, dict):
        out["additionalProperties"] = _convert(extra, defs)


def _needs_empty_default(name: str, prop: Schema, raw: Schema, required: set[str]) -> bool:
    return (
        name not in required
        and "default" not in prop
        and "properties" in prop
        and not prop.get("required")
        and not is_nullable(raw)
    )


def schema_at(schema: Schema, path: list[str | int]) -> tuple[Schema, list[str | int]]:
    """Walk ``path`` (property names and list indexes) as far as the schema goes.

    Returns the node reached and the path elements that matched, so callers can print a field path
    that omits pydantic's internal location tags.
    """
    node, walked = schema, []
    for element in path:
        if isinstance(element, int) and "items" in node:
            node = node["items"]
        elif isinstance(element, str) and element in node.get("properties", {}):
            node = node["properties"][element]
        elif isinstance(element, str) and isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            continue
        walked.append(element)
    return node, walked
