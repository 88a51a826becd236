"""What the API server does with a TideDeployment, reproduced for unit tests.

Defaulting, OpenAPI validation (jsonschema) and CEL rules (cel-python), in the API server's order.
The v1.20 test plane lacks CEL, so this is where the CRD's rules are exercised. Unknown fields are
rejected here as under strict field validation (kubectl >= 1.27 against a 1.25+ server); a v1.20
server prunes them instead, so there parse_spec never sees them. Checked once by hand against the
v1.20.2 kube-apiserver: it gave the same OpenAPI verdict on every row of spec_examples.CASES except
the unknown-field row (pruned), and the same defaults as pydantic.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

import celpy
import jsonschema

from tide_operator.api.crd import crd


@lru_cache(maxsize=1)
def resource_schema() -> dict[str, Any]:
    """Generated once per test session (callers never mutate it)."""
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Fill ``default`` values like the API server (recursively, defaults get their own defaults)."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, prop in schema["properties"].items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = apply_defaults(prop, out[name])
        return out
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _strict_jsonschema(node: Any) -> Any:
    """Kubernetes dialect -> plain JSON schema: unknown fields rejected, int-or-string spelled out."""
    if isinstance(node, list):
        return [_strict_jsonschema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict_jsonschema(value) for key, value in node.items() if not key.startswith("x-kubernetes")}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node:
        out.pop("additionalProperties", None)
    return out


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = _strict_jsonschema(resource_schema())
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft202012Validator(schema)


def openapi_errors(obj: dict[str, Any]) -> list[str]:
    validator = _validator()
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(obj)]


@lru_cache(maxsize=64)
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_failures(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Messages of every CEL rule that does not hold on ``value`` (already defaulted)."""
    failures = []
    for validation in schema.get("x-kubernetes-validations", ()):
        result = _program(validation["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            failures.append(f"{path or '<root>'}: {validation['message']}")
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value:
                failures += cel_failures(prop, value[name], f"{path}.{name}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            failures += cel_failures(schema["items"], item, f"{path}[{index}]")
    return failures


def api_server_verdict(spec: dict[str, Any], name: str = "chat") -> list[str]:
    """Problems the API server would report for a TideDeployment with ``spec`` (empty: accepted)."""
    obj = {
        "apiVersion": "tide.dev/v1alpha1",
        "kind": "TideDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }
    errors = openapi_errors(obj)
    if errors:
        return errors
    defaulted = apply_defaults(resource_schema(), obj)
    errors = openapi_errors(defaulted)  # defaults must validate too
    return errors or cel_failures(resource_schema(), defaulted)
