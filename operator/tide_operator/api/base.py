"""The base of every API model: frozen, strict, unknown fields rejected, camelCase on the wire."""

from __future__ import annotations

from typing import Annotated, cast

from pydantic import BaseModel, ConfigDict, JsonValue, StringConstraints
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Strict like the API server: ``"3"`` is not an integer and ``gpus_per_replica`` is not a field.

    Validate wire data with JSON (``model_validate_json``) so enum values arrive as strings; in
    Python use the camelCase aliases.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        populate_by_name=False,
        use_attribute_docstrings=True,
    )

    def to_wire(self) -> dict[str, object]:
        """The object as it appears in YAML: camelCase, enums as strings, unset optionals left out."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


# RFC 1123 label (Service, Secret, ConfigMap and ServiceAccount names fit in it).
DnsLabel = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
# RFC 1123 subdomain (PriorityClass names).
DnsSubdomain = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=253),
]
# GPU class names are catalog keys ("H100", "MI300X").
GpuClassName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=63)]
# Model locations: s3://bucket/prefix, a Hugging Face id or a path inside the image.
ModelLocation = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^\S+$")]


def cel_validations(*rules: dict[str, str]) -> dict[str, JsonValue]:
    """Schema extra carrying CEL rules (``x-kubernetes-validations``) for the generated CRD.

    Every rule has a Python twin in ``tide_operator.api.spec`` (the v1.20 test plane ignores CEL).
    """
    return cast(dict[str, JsonValue], {"x-kubernetes-validations": [dict(rule) for rule in rules]})
