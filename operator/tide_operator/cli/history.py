"""`tide history`: the draft lineage of a TideDeployment and its draft pool, read from its S3 draft registry.

Reads drafts/vN/manifest.json, promoted.json, history/ and pool.json (tide_contracts.registry) with the
caller's own AWS credentials (environment, profile or IAM role), or, with --credentials-from-secret,
those in the Secret the TideDeployment names.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from tide_contracts.registry import DraftRegistry, HistoryEntry, RegistryError

LAUNCH_DRAFT = "initial"  # the pool's name for spec.draft.initial (what the serving plugin reports)


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


@dataclass(frozen=True)
class PoolRow:
    """One entry of the draft pool's index (tide_contracts.draft_pool), times in UTC."""

    version: str
    added_at: str
    last_served_at: str
    signature_tokens: int | None  # tokens its domain signature summarises; None: no signature yet
    pinned: bool
    serving: bool


@dataclass(frozen=True)
class PoolView:
    """The pool of the TideDeployment's current target revision; ``note`` says why it shows empty."""

    target_revision: str | None
    entries: list[PoolRow] = field(default_factory=list)
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


def draft_pool(registry: DraftRegistry, obj: dict[str, Any]) -> PoolView:
    """pool.json for the spec's target revision: which entry serves (the pin, else the pointer of this
    revision, else the launch draft) and which is pinned. An index of another revision is not this one's."""
    spec = obj.get("spec", {})
    revision = spec.get("target", {}).get("revision")
    try:
        pool, _ = registry.pool()
        pointer, _ = registry.promoted()
    except RegistryError as e:
        return PoolView(revision, note=f"pool.json cannot be read: {e}")
    if pool is None:
        return PoolView(revision, note="no draft recorded yet")
    if pool.target_revision != revision:
        return PoolView(revision, note=f"pool.json indexes target revision {pool.target_revision}, not {revision}: "
                                       "empty for this target (replaced at its next record)")
    pin = spec.get("control", {}).get("draftPin")
    launch = LAUNCH_DRAFT if spec.get("draft", {}).get("initial") else None
    serving = pin or (pointer.version if pointer and pointer.target_revision == revision else launch)
    entries = [PoolRow(e.version, _utc(e.added_at), _utc(e.last_served_at),
                       e.signature.tokens if e.signature else None, e.version == pin, e.version == serving)
               for e in sorted(pool.entries, key=lambda e: (e.added_at, e.version))]
    return PoolView(revision, entries)


def _utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def as_document(rows: list[Lineage], events: list[HistoryEntry], pool: PoolView | None = None) -> dict[str, Any]:
    """`tide history -o json|yaml`: the lineage rows, the registry's history entries and the draft pool, as
    JSON types."""
    doc: dict[str, Any] = {"drafts": [asdict(r) for r in rows],
                           "history": [e.model_dump(mode="json") for e in events]}
    if pool is not None:
        doc["pool"] = asdict(pool)
    return dict(json.loads(json.dumps(doc)))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def render_history(rows: list[Lineage], events: list[HistoryEntry], title: str, pool: PoolView | None = None) -> str:
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
    if pool is not None:
        lines += render_pool(pool)
    if events:
        lines.append("Registry history:")
        lines += table([["AT", "ACTION", "VERSION", "PREVIOUS", "RUN", "REASON"],
                        *[[e.at, e.action + (" (by hand)" if e.manual else ""), _cell(e.version),
                           _cell(e.previous), _cell(e.run_id), e.reason or "-"]
                          for e in events]])
    return "\n".join(lines) + "\n"


def render_pool(pool: PoolView) -> list[str]:
    from tide_operator.cli.status import table

    lines = [f"Draft pool of target revision {pool.target_revision or '-'} (* serves):"]
    if not pool.entries:
        return [*lines, f"  empty: {pool.note}" if pool.note else "  empty"]
    header = ["VERSION", "ADDED", "LAST SERVED", "SIGNATURE TOKENS", "PINNED"]
    return lines + table([header, *[[("* " if r.serving else "  ") + r.version, r.added_at, r.last_served_at,
                                      _cell(r.signature_tokens), "pinned" if r.pinned else "-"] for r in pool.entries]])


def s3_client(obj: dict[str, Any], credentials: dict[str, str] | None, endpoint: str | None) -> Any:
    import boto3

    s3 = obj["spec"]["storage"]["s3"]
    keys = {}
    if credentials:
        keys = {"aws_access_key_id": credentials.get("AWS_ACCESS_KEY_ID"),
                "aws_secret_access_key": credentials.get("AWS_SECRET_ACCESS_KEY"),
                "aws_session_token": credentials.get("AWS_SESSION_TOKEN")}
    return boto3.client("s3", endpoint_url=endpoint or s3.get("endpoint"), region_name=s3.get("region"), **keys)
