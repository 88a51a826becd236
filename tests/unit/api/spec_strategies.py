"""Hypothesis strategies for TideDeployment specs, generated from the CRD's structural schema.

Every schema node maps to a strategy: objects to dicts (required properties always, optional ones
sometimes), integers within minimum/maximum, strings from their pattern within min/maxLength,
enums, lists (unique for list-type set, unique by key for list-type map). Two node kinds have no
shape in the schema and get their own strategies: ``x-kubernetes-int-or-string`` (resource
quantities) and ``x-kubernetes-preserve-unknown-fields`` (podTemplateOverride). The CEL rules are
not encoded here: the test filters generated specs through the API server harness (crd_harness).
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import strategies as st

from tests.unit.api.crd_harness import resource_schema
from tide_operator.api.units import DURATION_PATTERN

Schema = dict[str, Any]
Overrides = dict[str, st.SearchStrategy[Any]]
# How often an optional property is present: low, so most specs pass the CEL rules and the
# interesting ones (a zero duration, a boundary integer) are not drowned in rejected neighbours.
OPTIONAL_PRESENT_PERCENT = 40
MAX_GENERATED_ITEMS = 3
# Durations the pattern admits and the code divides by or compares: zero in every unit, the minimum
# rules' edges (interval 5s, training timeout 10s) and ordinary values.
EDGE_DURATIONS = ["0s", "0m", "0h", "0h0m0s", "1s", "4s", "5s", "9s", "10s", "2m", "30m", "1h", "99999h"]

# Quantities as Kubernetes writes them, plus a few it would refuse at apply time (the CRD does not).
QUANTITIES = st.one_of(
    st.integers(min_value=0, max_value=1024),
    st.from_regex(re.compile(r"^[0-9]{1,4}(m|Ki|Mi|Gi|k|M|G)?$"), fullmatch=True),
    st.sampled_from(["500m", "16Gi", "1.5", "0", "lots"]),
)
_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8))
_ARBITRARY_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=6), inner, max_size=2)),
    max_leaves=6,
)
_LABELS = st.dictionaries(st.sampled_from(["team", "tide.dev/deployment", "app"]), st.sampled_from(["a", "b"]),
                          max_size=2)
_CONTAINER = st.fixed_dictionaries(
    {"name": st.sampled_from(["vllm", "trainer", "sidecar"])},
    optional={"env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["A", "HF_HOME"]),
                                                      "value": st.text(max_size=4)}), max_size=2),
              "securityContext": st.fixed_dictionaries({}, optional={"privileged": st.booleans()})},
)
# podTemplateOverride: the pod-template shapes people write, and arbitrary JSON now and then.
POD_TEMPLATE_OVERRIDES = st.one_of(
    st.fixed_dictionaries({}, optional={
        "metadata": st.fixed_dictionaries({}, optional={"labels": _LABELS, "annotations": _LABELS}),
        "spec": st.fixed_dictionaries({}, optional={
            "nodeSelector": _LABELS,
            "containers": st.lists(_CONTAINER, max_size=2),
            "hostNetwork": st.booleans(),
            "runtimeClassName": st.sampled_from(["nvidia", "kata"]),
        }),
    }),
    st.dictionaries(st.text(max_size=6), _ARBITRARY_JSON, max_size=3),
)


def strategy_for(node: Schema, path: str = "spec", overrides: Overrides | None = None) -> st.SearchStrategy[Any]:
    """A strategy for values the OpenAPI part of ``node`` accepts (``overrides`` by dotted path)."""
    if overrides and path in overrides:
        return overrides[path]
    if node.get("x-kubernetes-int-or-string"):
        return QUANTITIES
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return POD_TEMPLATE_OVERRIDES
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    builders = {"object": _object, "array": _array, "string": _string, "integer": _integer}
    if kind == "boolean":
        return st.booleans()
    if kind not in builders:
        raise ValueError(f"no strategy for schema node {node}")
    return builders[kind](node, path, overrides or {})


def _object(node: Schema, path: str, overrides: Overrides) -> st.SearchStrategy[Any]:
    if "properties" not in node:
        values = strategy_for(node.get("additionalProperties", {"type": "string"}), f"{path}.*", overrides)
        keys = st.from_regex(re.compile(r"^[a-z][a-z.]{0,10}$"), fullmatch=True)
        return st.dictionaries(keys, values, max_size=min(node.get("maxProperties", 3), 3))
    required = set(node.get("required", ()))
    props = {name: strategy_for(prop, f"{path}.{name}", overrides) for name, prop in node["properties"].items()}
    always = {name: strategy for name, strategy in props.items() if name in required}
    sometimes = {name: _sometimes(strategy) for name, strategy in props.items() if name not in required}
    return st.fixed_dictionaries({**always, **sometimes}).map(_drop_absent)


_ABSENT = object()


def _sometimes(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    present = st.integers(0, 99).map(lambda roll: roll < OPTIONAL_PRESENT_PERCENT)
    return present.flatmap(lambda yes: strategy if yes else st.just(_ABSENT))


def _drop_absent(value: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if item is not _ABSENT}


def _array(node: Schema, path: str, overrides: Overrides) -> st.SearchStrategy[Any]:
    item, low = strategy_for(node["items"], f"{path}[]", overrides), node.get("minItems", 0)
    high = min(node.get("maxItems", MAX_GENERATED_ITEMS), max(low, MAX_GENERATED_ITEMS))
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set":
        return st.lists(item, min_size=low, max_size=high, unique=True)
    if list_type == "map":
        keys = node["x-kubernetes-list-map-keys"]
        return st.lists(item, min_size=low, max_size=high, unique_by=lambda v: tuple(v.get(key) for key in keys))
    return st.lists(item, min_size=low, max_size=high)


def _string(node: Schema, path: str, overrides: Overrides) -> st.SearchStrategy[str]:
    low, high = node.get("minLength", 0), node.get("maxLength", 64)
    if node.get("pattern") == DURATION_PATTERN:
        text = st.one_of(st.sampled_from(EDGE_DURATIONS), st.from_regex(re.compile(DURATION_PATTERN), fullmatch=True))
    elif "pattern" in node:
        text = st.from_regex(re.compile(node["pattern"]), fullmatch=True)
    else:
        text = st.text(min_size=low, max_size=min(high, 64))
    return text.filter(lambda s: low <= len(s) <= high)


def _integer(node: Schema, path: str, overrides: Overrides) -> st.SearchStrategy[int]:
    low, high = node.get("minimum", -(2**31)), node.get("maximum", 2**31 - 1)
    # The bounds half the time: a bound the code does not honour is the usual bug.
    return st.one_of(st.sampled_from([low, high]), st.integers(min_value=low, max_value=high))


def spec_schema() -> Schema:
    return resource_schema()["properties"]["spec"]  # type: ignore[no-any-return]


def specs(overrides: Overrides | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """Raw specs as a user could write them (OpenAPI-valid; CEL still to be checked).

    ``overrides`` replaces the strategy at a dotted path (``spec.inference.gpuClasses[]``): values
    the schema allows but that only an operator configuration makes meaningful, such as catalog keys.
    """
    return strategy_for(spec_schema(), "spec", overrides)
