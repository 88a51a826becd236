"""``parse_spec``: the one place raw YAML becomes a typed spec, or a SpecError naming the field."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.api.spec_errors import describe_validation_error
from tide_operator.api.spec_rules import cross_field_problems


class SpecError(ValueError):
    """An invalid spec; ``field`` is the path users see in their YAML (``spec.inference.replicas``)."""

    def __init__(self, field: str, message: str, problems: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        # Every problem found, the first being (field, message); the condition shows the first.
        self.problems = problems or ((field, message),)


def parse_spec(raw: Any, known_gpu_classes: Collection[str] | None = None) -> TideDeploymentSpec:
    """Validate ``raw`` (the CR's ``spec`` as a dict) like the API server would, plus cross-field rules.

    ``known_gpu_classes`` (the operator's catalog) also checks the gpuClasses lists. Raises SpecError.
    """
    if not isinstance(raw, dict):
        raise SpecError("spec", "must be an object")
    try:
        spec = TideDeploymentSpec.model_validate_json(json.dumps(raw))
    except TypeError as err:
        raise SpecError("spec", f"is not JSON data: {err}") from None
    except ValidationError as err:
        problems = describe_validation_error(err)
        raise SpecError(*problems[0], problems=problems) from None
    cross_field = cross_field_problems(spec, known_gpu_classes)
    if cross_field:
        raise SpecError(*cross_field[0], problems=tuple(cross_field))
    return spec
