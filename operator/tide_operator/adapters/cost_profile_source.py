"""The cost profile a TideDeployment names in ``spec.control.costProfile.configMapRef``.

The referenced key of the ConfigMap (in the deployment's namespace) holds JSON with the same points,
and the same bounds, as the inline ``spec.control.costProfile.points``::

    {"points": [{"batchSize": 1, "draftCostPermille": 200, "verifyCostPercent": 103},
                {"batchSize": 64, "draftCostPermille": 90, "verifyCostPercent": 150}]}

A missing ConfigMap or key, or a profile that does not parse, is an invalid spec naming the field:
the pass stops before any write, like a missing credentials Secret. Read on every reconcile pass,
so an edited profile takes effect at the next pass.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import Field, ValidationError

from tide_operator.api import SpecError, TideDeploymentSpec
from tide_operator.api.base import ApiModel
from tide_operator.api.spec_control import CostPoint

FIELD = "spec.control.costProfile.configMapRef"
ProfilePoints = tuple[tuple[int, int, int], ...]  # (batchSize, draftCostPermille, verifyCostPercent)


class ConfigMapReader(Protocol):
    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...


class CostProfileDocument(ApiModel):
    """The JSON document under the referenced key."""

    points: tuple[CostPoint, ...] = Field(min_length=1, max_length=64)


def parse_profile(text: str) -> ProfilePoints:
    """The profile's points sorted by batch size; ValueError naming the bad point otherwise."""
    try:
        document = CostProfileDocument.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise ValueError(f"{where}: {first['msg']}") from None
    points = sorted((p.batch_size, p.draft_cost_permille, p.verify_cost_percent) for p in document.points)
    sizes = [size for size, _, _ in points]
    if len(set(sizes)) != len(sizes):
        raise ValueError("points: batchSize values must be unique")
    return tuple(points)


def read_cost_profile(spec: TideDeploymentSpec, namespace: str, cluster: ConfigMapReader) -> ProfilePoints | None:
    """The referenced profile's points, None without a reference; SpecError naming the field."""
    ref = spec.control.cost_profile.config_map_ref if spec.control.cost_profile else None
    if ref is None:
        return None
    config_map = cluster.read("ConfigMap", namespace, ref.name)
    if config_map is None:
        raise SpecError(FIELD, f"ConfigMap {namespace}/{ref.name} not found")
    text = (config_map.get("data") or {}).get(ref.key)
    if text is None:
        raise SpecError(FIELD, f"ConfigMap {namespace}/{ref.name} has no key {ref.key!r}")
    try:
        return parse_profile(text)
    except ValueError as err:
        raise SpecError(FIELD, f"key {ref.key!r} of ConfigMap {namespace}/{ref.name}: {err}") from None
