from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_harness import api_server_verdict, apply_defaults, cel_failures, resource_schema
from spec_examples import CASES, MINIMAL, with_fields

from tide_operator.api import SpecError, parse_spec
from tide_operator.api.crd import crd, crd_without_cel, main, render_yaml
from tide_operator.api.extra_args import OWNED_LONG_FLAGS, OWNED_SHORT_FLAGS, denied_flag

REPO = Path(__file__).resolve().parents[3]
COMMITTED = [
    REPO / "crds" / "tidedeployment.yaml",
    REPO / "charts" / "tide-operator" / "files" / "crds" / "tidedeployment.yaml",
]


@pytest.mark.parametrize("path", COMMITTED, ids=["crds", "chart"])
def test_committed_crd_matches_the_models(path: Path) -> None:
    assert path.read_text() == render_yaml(crd()), (
        f"{path} drifted: regenerate it with `python -m tide_operator.api.crd` (crds/ and the chart)"
    )


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, node)]
    for name, prop in node.get("properties", {}).items():
        nodes += _walk(prop, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        nodes += _walk(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        nodes += _walk(node["items"], f"{path}[]")
    return nodes


def test_schema_is_structural() -> None:
    forbidden = {
        "$ref",
        "$defs",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "title",
        "propertyNames",
        "const",
        "prefixItems",
    }
    for path, node in _walk(resource_schema()):
        typed = (
            "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path or '<root>'} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert not forbidden & node.keys(), f"{path}: {forbidden & node.keys()}"
        assert node.get("default", 0) is not None, f"{path}: null default"
        # The v1.20 API server reads an empty-string default as null and rejects the CRD.
        assert node.get("default", 0) != "", f"{path}: empty-string default"
        if node.get("type") == "array":
            assert "items" in node, path


def test_no_string_field_accepts_the_empty_string() -> None:
    # The v1.20 API server validates "" in a custom resource as null ("must be of type string"), so a
    # field that accepted "" would pass parse_spec and fail at the API server.
    schema = resource_schema()["properties"]
    nodes = _walk(schema["spec"], ".spec") + _walk(schema["status"], ".status")
    for path, node in nodes:
        if node.get("type") == "string" and "enum" not in node:
            refuses_empty = node.get("minLength", 0) >= 1 or re.match(node.get("pattern", ""), "") is None
            assert refuses_empty, f"{path} accepts an empty string"


def test_every_list_and_string_used_by_cel_is_bounded() -> None:
    # The API server's CEL cost estimate rejects rules over unbounded lists and strings.
    extra_args = resource_schema()["properties"]["spec"]["properties"]["inference"]["properties"]["extraArgs"]
    assert extra_args["maxItems"] <= 64
    assert extra_args["items"]["maxLength"] <= 1024


def test_defaults_in_the_schema_validate_and_match_pydantic() -> None:
    defaulted = apply_defaults(resource_schema()["properties"]["spec"], MINIMAL)
    assert parse_spec(defaulted) == parse_spec(MINIMAL)
    assert defaulted["control"]["canary"]["analysisWindow"] == "5m"
    assert parse_spec(MINIMAL).to_wire() == defaulted


def test_subresources_and_printer_columns() -> None:
    version = crd()["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.inference.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    printed = version["additionalPrinterColumns"]
    columns = {column["name"]: column["jsonPath"] for column in printed}
    assert [name for name, column in zip(columns, printed, strict=True) if not column.get("priority")] == [
        "Ready",
        "Replicas",
        "Phase",
        "Draft",
        "Speculation",
        "Acceptance",
        "Age",
    ]
    assert columns["Acceptance"] == ".status.speculation.acceptanceLength"
    status = resource_schema()["properties"]["status"]
    for column in printed:
        if column["jsonPath"].startswith(".status."):
            node = status
            for part in column["jsonPath"].split(".")[2:]:
                node = node["properties"][part]  # the column points at a real status field
            assert node["type"] == column["type"], column  # and prints it as what it is
            assert column["description"] == node["description"]
    names = crd()["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        "TideDeployment",
        "tidedeployments",
        ["td"],
    )
    assert crd()["spec"]["group"] == "tide.dev"
    assert version["name"] == "v1alpha1"


def test_conditions_are_a_list_map_keyed_by_type() -> None:
    conditions = resource_schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) >= {"type", "status", "reason", "lastTransitionTime"}


def test_generator_prints_either_variant(capsys: pytest.CaptureFixture[str]) -> None:
    main([])
    assert yaml.safe_load(capsys.readouterr().out) == crd()
    main(["--without-cel"])
    assert yaml.safe_load(capsys.readouterr().out) == crd_without_cel()


def test_crd_without_cel_differs_only_by_the_rules() -> None:
    full, plain = crd(), crd_without_cel()
    assert "x-kubernetes-validations" in yaml.safe_dump(full)
    assert "x-kubernetes-validations" not in yaml.safe_dump(plain)
    assert len(yaml.safe_dump(full).splitlines()) > len(yaml.safe_dump(plain).splitlines())
    assert plain["spec"]["versions"][0]["subresources"] == full["spec"]["versions"][0]["subresources"]


@pytest.mark.parametrize(("spec", "field"), [pytest.param(spec, field, id=case) for case, spec, field in CASES])
def test_api_server_and_parse_spec_agree(spec: dict, field: str | None) -> None:
    problems = api_server_verdict(spec)
    try:
        parse_spec(spec)
        accepted = True
    except SpecError:
        accepted = False
    assert accepted == (not problems), problems
    assert accepted == (field is None)


@pytest.mark.parametrize(
    ("spec", "rule_path"),
    [
        (with_fields(target__tensorParallelSize=3, inference__gpusPerReplica=4), ".spec"),
        (with_fields(inference__replicas=4, control__canary={"replicas": 4}), ".spec"),
        (with_fields(control__costProfile={}), ".spec.control.costProfile"),
        (with_fields(control__capture={"kmsKeyId": "k"}), ".spec.control.capture"),
        (with_fields(control__interval="4s"), ".spec.control"),
        (with_fields(control__drift={"shortHalfLife": "30m"}), ".spec.control"),
        (with_fields(control__training={"sampleThreshold": 4097}), ".spec.control"),
        (with_fields(inference__extraArgs=["--host=0.0.0.0"]), ".spec.inference.extraArgs"),
    ],
)
def test_each_cel_rule_fires_where_expected(spec: dict, rule_path: str) -> None:
    problems = api_server_verdict(spec)
    assert [problem.split(":")[0] for problem in problems] == [rule_path]


@pytest.mark.parametrize("name", ["chat", "a", "llama-70b-prod", "x" * 58])
def test_name_rule_accepts_rfc1035_labels(name: str) -> None:
    assert api_server_verdict(MINIMAL, name=name) == []


@pytest.mark.parametrize("name", ["Chat", "1chat", "chat-", "x" * 59, "chat.prod"])
def test_name_rule_refuses_other_names(name: str) -> None:
    assert api_server_verdict(MINIMAL, name=name) == [
        "<root>: metadata.name must be an RFC 1035 label of at most 58 characters"
    ]


def _all_spellings() -> list[str]:
    spellings = [
        "--",
        "--served-model",
        "--served_model=x",
        "--tensor-parallel",
        "--spec",
        "--worker-ext",
        "-t",
        "-s",
        "-sc.method",
        "--config",
        "--config=x.yaml",
    ]
    for flag in OWNED_LONG_FLAGS:
        underscored = "--" + flag[2:].replace("-", "_")
        spellings += [flag, f"{flag}=x", underscored, f"{underscored}=x", f"{flag}.key", f"{flag}.key=1"]
    for flag in OWNED_SHORT_FLAGS:
        spellings += [flag, f"{flag}=2", f"{flag}2"]
    return spellings


# Real vLLM flags and values that only look like owned ones.
ALLOWED_ARGS = [
    "--max-model-len",
    "4096",
    "--model-loader-extra-config",
    "--model-impl",
    "--enable-prefix-caching",
    "-O3",
    "--hostname-override",
    "--portable",
    "--revision-x",
    "--tokenizer-mode",
    "--config-format",
    "--speculative-configs",
    "--worker-cls",
    "-pp",
    "x",
    '{"model": 1}',
    "--max_num_seqs=8",
]


@pytest.mark.parametrize("arg", _all_spellings() + ALLOWED_ARGS)
def test_extra_args_cel_rule_matches_the_python_deny_list(arg: str) -> None:
    node = resource_schema()["properties"]["spec"]["properties"]["inference"]["properties"]["extraArgs"]
    cel_denied = bool(cel_failures(node, [arg]))
    assert cel_denied == (denied_flag(arg) is not None)
    assert cel_denied == (arg not in ALLOWED_ARGS)


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--served-model", "--served-model-name"),
        ("--speculative_config.method", "--speculative-config"),
        ("-tp8", "-tp"),
        ("-s", "-sc"),
        ("--tokenizer", "--tokenizer"),
        ("--tokenizer-rev", "--tokenizer-revision"),
    ],
)
def test_denied_flag_names_the_owned_flag(arg: str, flag: str) -> None:
    assert denied_flag(arg) == flag
