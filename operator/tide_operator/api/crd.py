"""The TideDeployment CustomResourceDefinition, generated from the API models.

``python -m tide_operator.api.crd > crds/tidedeployment.yaml`` writes the committed file (a unit
test fails when it drifts). ``crd_without_cel()`` is the same CRD for API servers older than 1.25,
which reject ``x-kubernetes-validations`` (the v1.20 integration plane); there the Python twins in
``spec_rules`` are the only cross-field check.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import yaml

from tide_operator.api.resource import CRD_NAME, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from tide_operator.api.schema import Schema, openapi_schema
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.api.status import TideDeploymentStatus

# Child names append up to 5 characters ("-vllm") and Services need RFC 1035 labels.
MAX_NAME_LENGTH = 58
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

ROOT_DESCRIPTION = (
    "A vLLM deployment whose speculative draft the operator keeps aligned with live traffic: it decides "
    "whether to speculate, captures hidden states when traffic drifts, trains a new draft on cheaper GPUs, "
    "canaries it and promotes or rolls back. spec is what you ask for; status is what the operator observed."
)
# kubectl get: the status a platform engineer scans first; -o wide adds the priority 1 columns.
# Each column's description is its status field's (description_of), so the two never disagree.
PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Ready", "type": "integer", "jsonPath": ".status.inferencePool.replicasReady"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.inferencePool.replicas"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Draft", "type": "string", "jsonPath": ".status.draft.current"},
    {"name": "Speculation", "type": "boolean", "jsonPath": ".status.speculation.enabled"},
    {"name": "Acceptance", "type": "number", "jsonPath": ".status.speculation.acceptanceLength"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Inference GPU", "type": "string", "jsonPath": ".status.inferencePool.gpuClass", "priority": 1},
    {"name": "Training GPU", "type": "string", "jsonPath": ".status.trainingPool.gpuClass", "priority": 1},
)
NAME_RULE = {
    "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{NAME_PATTERN}')",
    "message": f"metadata.name must be an RFC 1035 label of at most {MAX_NAME_LENGTH} characters",
}


def resource_schema() -> Schema:
    """The openAPIV3Schema of the resource: spec and status from the models, name rule at the root."""
    return {
        "type": "object",
        "description": ROOT_DESCRIPTION,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi_schema(TideDeploymentSpec),
            "status": openapi_schema(TideDeploymentStatus),
        },
        "x-kubernetes-validations": [NAME_RULE],
    }


def printer_columns(schema: Schema) -> list[dict[str, Any]]:
    """PRINTER_COLUMNS, each status column described by its field's description in ``schema``."""
    columns = []
    for column in PRINTER_COLUMNS:
        node = schema
        for part in column["jsonPath"].split(".")[1:]:
            node = node.get("properties", {}).get(part, {})
        description = node.get("description")
        columns.append({**column, "description": description} if description else dict(column))
    return columns


def crd() -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition."""
    schema = resource_schema()
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.inference.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
        "additionalPrinterColumns": printer_columns(schema),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "tide-operator"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["tide"],
            },
            "versions": [version],
        },
    }


def strip_cel(node: Any) -> Any:
    """A copy of ``node`` without any ``x-kubernetes-validations``."""
    if isinstance(node, dict):
        return {key: strip_cel(value) for key, value in node.items() if key != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [strip_cel(item) for item in node]
    return copy.deepcopy(node)


def crd_without_cel() -> dict[str, Any]:
    """The CRD for API servers without CEL (before 1.25), such as the v1.20 test plane."""
    return strip_cel(crd())  # type: ignore[no-any-return]


def render_yaml(document: dict[str, Any]) -> str:
    header = "# Generated by `python -m tide_operator.api.crd` from tide_operator.api: do not edit.\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> None:
    """Print the CRD; ``--without-cel`` prints the variant for API servers before 1.25."""
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.write(render_yaml(crd_without_cel() if "--without-cel" in args else crd()))


if __name__ == "__main__":
    main()
