"""Is a live object one of this TideDeployment's children? (pure; issue 12 item 4)

The owner reference with the TideDeployment's UID is the only proof: a name can be chosen by
anyone in the namespace, a UID cannot. An object that carries a child's name without that
reference is never patched, adopted or used; the pass reports a ChildConflict instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Ownership(StrEnum):
    ABSENT = "absent"  # nothing of that name: ours to create
    OURS = "ours"  # carries our owner UID: ours to apply, use or delete
    FOREIGN = "foreign"  # someone else's: leave it exactly as it is


@dataclass(frozen=True)
class Conflict:
    """An object named like a child that this TideDeployment does not own."""

    kind: str
    name: str
    owners: tuple[str, ...]  # "Kind/name" of its owner references, if any

    def describe(self) -> str:
        held = f"owned by {', '.join(self.owners)}" if self.owners else "with no owner"
        return f"{self.kind} {self.name} exists {held}"


def owner_uids(obj: dict[str, Any]) -> set[str]:
    return {ref.get("uid", "") for ref in (obj.get("metadata") or {}).get("ownerReferences") or []} - {""}


def ownership(owner_uid: str, live: dict[str, Any] | None) -> Ownership:
    if live is None:
        return Ownership.ABSENT
    # An empty UID proves nothing: without it no live object can be shown to be ours.
    return Ownership.OURS if owner_uid and owner_uid in owner_uids(live) else Ownership.FOREIGN


def conflict(owner_uid: str, kind: str, live: dict[str, Any] | None) -> Conflict | None:
    """The conflict a live ``kind`` object poses to the owner with ``owner_uid``; None when it may be used."""
    if live is None or ownership(owner_uid, live) is not Ownership.FOREIGN:
        return None
    refs = (live.get("metadata") or {}).get("ownerReferences") or []
    return Conflict(kind, live["metadata"]["name"],
                    tuple(f"{r.get('kind', '?')}/{r.get('name', '?')}" for r in refs))


class ChildConflict(Exception):
    """Raised by the cluster adapter instead of writing to (or using) an object it does not own."""

    def __init__(self, conflicts: list[Conflict]) -> None:
        self.conflicts = tuple(conflicts)
        super().__init__(describe(self.conflicts))


def describe(conflicts: tuple[Conflict, ...] | list[Conflict]) -> str:
    return "; ".join(c.describe() for c in conflicts) + (
        " and not by this TideDeployment: left untouched (delete or rename it to let the operator create its own)")
