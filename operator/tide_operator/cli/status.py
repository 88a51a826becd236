"""`tide status`: one screen that says what a TideDeployment is doing and why."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tide_operator.cli.kube import EventNote


def age(timestamp: str | None, now: datetime) -> str:
    """kubectl-style age (``45s``, ``12m``, ``3h``, ``2d``) of an RFC 3339 time; ``-`` when unknown."""
    if not timestamp:
        return "-"
    seconds = int((now - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _pools(status: dict[str, Any]) -> list[str]:
    inference, training = status.get("inferencePool") or {}, status.get("trainingPool") or {}
    lines = []
    if inference:
        lines.append(f"Inference pool:  {inference.get('gpuClass') or 'none'}, "
                     f"{inference.get('replicasReady', 0)}/{inference.get('replicas', 0)} replicas ready, "
                     f"{_count(inference.get('nodes', 0), 'node')} fit")
    else:
        lines.append("Inference pool:  not chosen yet")
    groups = status.get("servingGroups") or []
    if groups:  # inference.servingGroups: a Deployment per class, the total split across them
        lines.append("Serving groups:  " + ", ".join(
            f"{g.get('gpuClass')} {g.get('replicasReady', 0)}/{g.get('replicas', 0)}"
            + (" (retiring)" if g.get("retiring") else "") for g in groups))
    lines.append(f"Training pool:   {training.get('gpuClass') or 'not chosen yet'}"
                 + (f", {_count(training.get('nodes', 0), 'node')} fit" if training else ""))
    return lines


def _draft(status: dict[str, Any]) -> str:
    draft = status.get("draft") or {}
    if not draft:
        return "Draft:           none reported yet"
    text = f"Draft:           current {draft.get('current') or 'none'}"
    if draft.get("servedRevision"):
        text += f" (target revision {draft['servedRevision']})"
    if draft.get("candidate"):
        text += f", candidate {draft['candidate']}"
    return text


def _canary(status: dict[str, Any]) -> list[str]:
    canary = status.get("canary")
    if not canary:
        return []
    pods = ", ".join(canary.get("pods") or ()) or "no ready pod"
    return [f"Canary:          {canary.get('candidate')} on {pods}"]


def _speculation(status: dict[str, Any]) -> str:
    speculation = status.get("speculation") or {}
    if not speculation:
        return "Speculation:     no decision yet"
    parts = ["on" if speculation.get("enabled") else "off"]
    if speculation.get("numSpeculativeTokens"):
        parts.append(f"{speculation['numSpeculativeTokens']} speculative tokens")
    if speculation.get("acceptanceLengthMilli") is not None:
        parts.append(f"acceptance length {speculation['acceptanceLengthMilli'] / 1000:.2f} tokens/step")
    if speculation.get("modelledSpeedupPercent") is not None:
        parts.append(f"modelled speedup {speculation['modelledSpeedupPercent'] / 100:.2f}x")
    return "Speculation:     " + ", ".join(parts)


def _decision(status: dict[str, Any], now: datetime) -> str:
    decision = status.get("lastDecision")
    if not decision:
        return "Last decision:   none yet"
    text = f"Last decision:   {decision['action']} ({decision['reason']}), {age(decision.get('time'), now)} ago"
    return text + (f": {decision['message']}" if decision.get("message") else "")


def render_status(obj: dict[str, Any], events: Sequence[EventNote] = (), now: datetime | None = None) -> str:
    """The text `tide status` prints for a TideDeployment object (as read from the API)."""
    now = now or datetime.now(UTC)
    meta, status = obj["metadata"], obj.get("status") or {}
    generation, observed = meta.get("generation", 0), status.get("observedGeneration", 0)
    lines = [f"TideDeployment {meta['namespace']}/{meta['name']}: phase {status.get('phase') or 'unknown'}, "
             f"generation {generation} (observed {observed})"]
    if observed < generation:
        lines.append("  the operator has not yet acted on the latest spec change")
    conditions = status.get("conditions") or []
    lines.append("Conditions:" if conditions else "Conditions:      none yet (is the operator running?)")
    if conditions:
        rows = [["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]]
        rows += [[c["type"], c["status"], c.get("reason", ""), age(c.get("lastTransitionTime"), now),
                  c.get("message", "")] for c in conditions]
        lines += table(rows)
    lines += [*_pools(status), _draft(status), *_canary(status), _speculation(status), _decision(status, now)]
    if events:
        lines.append("Recent events:")
        rows = [["AGE", "TYPE", "REASON", "MESSAGE"]]
        rows += [[age(e.time, now), e.type, e.reason, e.message] for e in events]
        lines += table(rows)
    return "\n".join(lines) + "\n"
