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
from tide_operator.api.spec_control import ConfigMapKeyRef, CostPoint

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
    return read_profile_ref(ref, namespace, cluster, FIELD) if ref is not None else None


def read_group_profiles(spec: TideDeploymentSpec, namespace: str,
                        cluster: ConfigMapReader) -> dict[str, ProfilePoints]:
    """Each serving group's own cost profile (inference.servingGroups[].costProfile), by class: its points,
    or its ConfigMap's; SpecError naming the group's field."""
    out: dict[str, ProfilePoints] = {}
    for i, group in enumerate(spec.inference.serving_groups):
        profile = group.cost_profile
        if profile is None:
            continue
        if profile.config_map_ref is not None:
            out[group.gpu_class] = read_profile_ref(profile.config_map_ref, namespace, cluster,
                                                    f"spec.inference.servingGroups[{i}].costProfile.configMapRef")
        elif profile.points:
            out[group.gpu_class] = tuple(sorted((p.batch_size, p.draft_cost_permille, p.verify_cost_percent)
                                                for p in profile.points))
    return out


def read_profile_ref(ref: ConfigMapKeyRef, namespace: str, cluster: ConfigMapReader, field: str) -> ProfilePoints:
    """The points under a ConfigMap's key; SpecError naming ``field`` when missing or bad."""
    config_map = cluster.read("ConfigMap", namespace, ref.name)
    if config_map is None:
        raise SpecError(field, f"ConfigMap {namespace}/{ref.name} not found")
    text = (config_map.get("data") or {}).get(ref.key)
    if text is None:
        raise SpecError(field, f"ConfigMap {namespace}/{ref.name} has no key {ref.key!r}")
    try:
        return parse_profile(text)
    except ValueError as err:
        raise SpecError(field, f"key {ref.key!r} of ConfigMap {namespace}/{ref.name}: {err}") from None
