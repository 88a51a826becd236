"""Pydantic validation errors in the words ``kubectl`` users read: ``spec.x.y: must be ...``."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from tide_operator.api.schema import Schema, openapi_schema, schema_at
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.api.units import BYTES_PATTERN, DURATION_PATTERN

_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "string_type": "a string",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "tuple_type": "a list",
    "list_type": "a list",
}
_PATTERN_WORDS = {
    DURATION_PATTERN: "must be a duration like 30s, 5m or 1h30m",
    BYTES_PATTERN: "must be a byte quantity like 512Mi or 2Gi",
}


@lru_cache(maxsize=1)
def _spec_schema() -> Schema:
    return openapi_schema(TideDeploymentSpec)


def format_path(walked: list[str | int]) -> str:
    path = "spec"
    for element in walked:
        path += f"[{element}]" if isinstance(element, int) else f".{element}"
    return path


def _bounds(node: Schema) -> str:
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        return f"must be between {low} and {high}"
    return f"must be at least {low}" if low is not None else f"must be at most {high}"


_FIXED_WORDS = {"missing": "is required", "extra_forbidden": "is not a field of this object"}


def _message(error: ErrorDetails, node: Schema) -> str:
    kind = error["type"]
    if kind in _FIXED_WORDS:
        return _FIXED_WORDS[kind]
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}"
    if kind in ("greater_than_equal", "less_than_equal"):
        return _bounds(node)
    if kind == "enum" or "enum" in node:
        return f"must be one of {', '.join(map(str, node.get('enum', ())))}"
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        return _PATTERN_WORDS.get(pattern, f"{_shown(error['input'])} must match {pattern}")
    return error["msg"]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_validation_error(err: ValidationError) -> tuple[tuple[str, str], ...]:
    """One (field path, message) per pydantic error, in pydantic's order."""
    problems = []
    for error in err.errors():
        node, walked = schema_at(_spec_schema(), list(error["loc"]))
        if error["type"] == "extra_forbidden":
            walked.append(error["loc"][-1])  # the unknown field itself is not in the schema
        problems.append((format_path(walked), _message(error, node)))
    return tuple(problems)
