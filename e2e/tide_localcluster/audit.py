"""Read the apiserver's audit log: which writes a user made (tests count the operator's)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

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


class AuditLog:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def mark(self) -> int:
        """A position to count from: the number of bytes written so far."""
        return self.path.stat().st_size if self.path.exists() else 0

    def writes(self, user: str, since: int = 0) -> list[WriteCall]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
        calls = []
        for line in lines:
            event = json.loads(line) if line.strip() else {}
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
                continue
            if event.get("user", {}).get("username") != user:
                continue
            ref = event.get("objectRef", {})
            calls.append(WriteCall(event["verb"], ref.get("resource", ""), ref.get("namespace", ""),
                                   ref.get("name", ""), ref.get("subresource", ""),
                                   int(event.get("responseStatus", {}).get("code", 0))))
        return calls
