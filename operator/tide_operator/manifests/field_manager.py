"""Server-Side Apply under the operator's field manager (pure; issue 12 item 5).

A child is applied whole, so a field the operator no longer builds (an env var dropped from
``podTemplateOverride``) leaves the live object: the API server removes what this manager owned
and stopped applying. Children made before SSA were written by an Update manager, the client's
default or ours on create; their fields move to our Apply entry once, as client-go's csaupgrade
does for kubectl, or the server would keep every field they ever set.

A pass applies only when needed: the desired object carries a hash of itself, so a removal
shows as a changed hash, and a hand edit of a field we build shows as a difference.
"""

from __future__ import annotations

from typing import Any

from tide_operator.manifests.compare import differences
from tide_operator.manifests.fingerprint import stable_hash

FIELD_MANAGER = "tide-operator"
# The kubernetes Python client's default manager (the user agent's first word), which earlier
# versions of the operator wrote children with.
LEGACY_FIELD_MANAGERS = ("OpenAPI-Generator",)
APPLIED_HASH_ANNOTATION = "tide.dev/applied-hash"


def with_applied_hash(desired: dict[str, Any]) -> dict[str, Any]:
    """``desired`` without None values, annotated with the hash of exactly that object."""
    body: dict[str, Any] = _without_none(desired)
    body["metadata"].get("annotations", {}).pop(APPLIED_HASH_ANNOTATION, None)
    digest = stable_hash(body)
    body["metadata"]["annotations"] = {**body["metadata"].get("annotations", {}), APPLIED_HASH_ANNOTATION: digest}
    return body


QUANTITY_MAPS = ("limits", "requests")  # resource name -> quantity
QUANTITY_FIELDS = ("sizeLimit",)


def _without_none(value: Any, quantities: bool = False) -> Any:
    """The apply form: no nulls (our builders mean "leave it out"), quantities as strings (an
    apply body is typed: the v1.20 server refuses a number where a quantity goes)."""
    if isinstance(value, dict):
        return {k: _quantity(v) if quantities or k in QUANTITY_FIELDS else _without_none(v, k in QUANTITY_MAPS)
                for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _quantity(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _applies(entry: dict[str, Any]) -> bool:
    return entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply"


def _legacy(entry: dict[str, Any], api_version: str) -> bool:
    return (entry.get("manager") in (*LEGACY_FIELD_MANAGERS, FIELD_MANAGER) and entry.get("operation") == "Update"
            and entry.get("apiVersion") == api_version and not entry.get("subresource"))


def migrated_managed_fields(live: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The managedFields with our Update-era entries folded into one Apply entry of ours.

    None when nothing is to migrate: we already apply this object (later Update entries of
    those managers are someone's hand edits, not ours), or no entry of an old manager is left.
    """
    entries = (live.get("metadata") or {}).get("managedFields") or []
    legacy = [e for e in entries if _legacy(e, live.get("apiVersion", ""))]
    if not legacy or any(_applies(e) for e in entries):
        return None
    fields: dict[str, Any] = {}
    for entry in legacy:
        fields = _union(fields, entry.get("fieldsV1") or {})
    newest = max(legacy, key=lambda e: e.get("time") or "")
    applied = {"manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": newest["apiVersion"],
               "time": newest.get("time"), "fieldsType": "FieldsV1", "fieldsV1": fields}
    return [_without_none(applied), *(e for e in entries if e not in legacy)]


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Union of two FieldsV1 trees (nested sets written as dicts of empty leaves)."""
    out = dict(a)
    for key, value in b.items():
        out[key] = _union(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def apply_needed(body: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """Why ``body`` (from ``with_applied_hash``) must be applied over ``live``; empty: skip the write."""
    drift = differences(body, live)
    if not any(_applies(e) for e in (live.get("metadata") or {}).get("managedFields") or []):
        drift.append("managedFields (not yet applied by this manager)")
    return drift
