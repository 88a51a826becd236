"""`tide history`: the draft lineage of a TideDeployment, read from its S3 draft registry.

Reads drafts/vN/manifest.json, promoted.json and history/ (tide_contracts.registry) with the
caller's own AWS credentials (environment, profile or IAM role), or, with --credentials-from-secret,
those in the Secret the TideDeployment names.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from tide_contracts.registry import DraftRegistry, HistoryEntry, RegistryError


@dataclass(frozen=True)
class Lineage:
    """One row per promoted draft version, oldest first."""

    version: str
    parent: str | None
    run_id: str | None
    promoted_at: str | None
    samples: int | None
    eval_acceptance_length: float | None
    training_window: tuple[str, str] | None
    served: bool
    note: str = ""


def registry_for(obj: dict[str, Any], s3_client: Any) -> DraftRegistry:
    """The registry a TideDeployment's spec.storage.s3 names (prefix default: <namespace>/<name>)."""
    s3 = obj["spec"]["storage"]["s3"]
    meta = obj["metadata"]
    return DraftRegistry(s3_client, s3["bucket"], s3.get("prefix") or f"{meta['namespace']}/{meta['name']}")


def lineage(registry: DraftRegistry) -> tuple[list[Lineage], list[HistoryEntry]]:
    pointer, _ = registry.promoted()
    rows = []
    for version in registry.list_versions():
        try:
            manifest = registry.draft_manifest(version)
        except RegistryError:  # a vN claimed by a promotion that never finished
            rows.append(Lineage(version, None, None, None, None, None, None, False, "incomplete"))
            continue
        train = manifest.samples.get("train_requests", manifest.samples.get("train_tokens"))
        rows.append(Lineage(version, manifest.parent, manifest.run_id, manifest.promoted_at, train,
                            manifest.evaluation_acceptance_length, manifest.training_window,
                            served=pointer is not None and pointer.version == version))
    return rows, registry.history()


def as_document(rows: list[Lineage], events: list[HistoryEntry]) -> dict[str, Any]:
    """`tide history -o json|yaml`: the lineage rows and the registry's history entries, as JSON types."""
    doc = {"drafts": [asdict(r) for r in rows], "history": [e.model_dump(mode="json") for e in events]}
    return dict(json.loads(json.dumps(doc)))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def render_history(rows: list[Lineage], events: list[HistoryEntry], title: str) -> str:
    from tide_operator.cli.status import table

    lines = [f"Draft lineage of {title}:"]
    if not rows:
        lines.append("  no draft promoted yet (the initial draft is serving)")
    else:
        header = ["VERSION", "PARENT", "RUN", "PROMOTED", "TRAIN SAMPLES", "EVAL LENGTH", "TRAINED ON", "NOTE"]
        body = [[("* " if r.served else "  ") + r.version, _cell(r.parent), _cell(r.run_id), _cell(r.promoted_at),
                 _cell(r.samples), _cell(r.eval_acceptance_length),
                 " to ".join(r.training_window) if r.training_window else "-",
                 "serving" if r.served else r.note] for r in rows]
        lines += table([header, *body])
    if events:
        lines.append("Registry history:")
        lines += table([["AT", "ACTION", "VERSION", "PREVIOUS", "RUN", "REASON"],
                        *[[e.at, e.action + (" (by hand)" if e.manual else ""), _cell(e.version),
                           _cell(e.previous), _cell(e.run_id), e.reason or "-"]
                          for e in events]])
    return "\n".join(lines) + "\n"


def s3_client(obj: dict[str, Any], credentials: dict[str, str] | None, endpoint: str | None) -> Any:
    import boto3

    s3 = obj["spec"]["storage"]["s3"]
    keys = {}
    if credentials:
        keys = {"aws_access_key_id": credentials.get("AWS_ACCESS_KEY_ID"),
                "aws_secret_access_key": credentials.get("AWS_SECRET_ACCESS_KEY"),
                "aws_session_token": credentials.get("AWS_SESSION_TOKEN")}
    return boto3.client("s3", endpoint_url=endpoint or s3.get("endpoint"), region_name=s3.get("region"), **keys)
