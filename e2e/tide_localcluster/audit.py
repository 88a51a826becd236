"""Read the apiserver's audit log: which calls a user made (tests count the operator's writes, and
derive the verbs its RBAC must grant from every call of the namespaced operator's user)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class WriteCall:
    verb: str
    resource: str
    namespace: str
    name: str
    subresource: str
    code: int

    def __str__(self) -> str:
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource}{sub} {self.namespace}/{self.name} -> {self.code}"


@dataclass(frozen=True)
class ApiCall:
    """One resource request (reads included); ``resource`` carries its subresource as RBAC names it."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    code: int
    uri: str = field(default="", compare=False)  # path and query string: selectors, resourceVersion

    @property
    def permission(self) -> tuple[str, str, str]:
        return self.group, self.resource, self.verb

    def __str__(self) -> str:
        return f"{self.verb} {self.group or 'core'}/{self.resource} {self.namespace}/{self.name} -> {self.code}"


class AuditLog:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def mark(self) -> int:
        """A position to count from: the number of bytes written so far."""
        return self.path.stat().st_size if self.path.exists() else 0

    def writes(self, user: str, since: int = 0) -> list[WriteCall]:
        calls = []
        for event in self._completed(user, since):
            if event.get("verb") not in WRITE_VERBS:
                continue
            ref = event.get("objectRef", {})
            calls.append(WriteCall(event["verb"], ref.get("resource", ""), ref.get("namespace", ""),
                                   ref.get("name", ""), ref.get("subresource", ""), _code(event)))
        return calls

    def calls(self, user: str, since: int = 0) -> list[ApiCall]:
        """Every resource request ``user`` completed (discovery of /api and /apis left out: RBAC grants it to
        all). A watch completes only when it closes: stop the client before reading."""
        return [call for event in self._completed(user, since) if (call := _api_call(event))]

    def calls_by_agent(self, user: str, since: int = 0) -> dict[str, list[ApiCall]]:
        """``calls`` grouped by User-Agent: replicas of one operator share a user, not an agent."""
        by_agent: dict[str, list[ApiCall]] = {}
        for event in self._completed(user, since):
            if call := _api_call(event):
                by_agent.setdefault(event.get("userAgent", ""), []).append(call)
        return by_agent

    def _completed(self, user: str, since: int) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
        for line in lines:
            event = json.loads(line) if line.strip() else {}
            if event.get("stage") == "ResponseComplete" and event.get("user", {}).get("username") == user:
                yield event


def _api_call(event: dict[str, Any]) -> ApiCall | None:
    ref = event.get("objectRef")
    if not ref:
        return None
    resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return ApiCall(event["verb"], ref.get("apiGroup", ""), resource, ref.get("namespace", ""), ref.get("name", ""),
                   _code(event), event.get("requestURI", ""))


def _code(event: dict[str, Any]) -> int:
    return int(event.get("responseStatus", {}).get("code", 0))
