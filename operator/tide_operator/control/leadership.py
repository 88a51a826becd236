"""Leader election on a coordination.k8s.io/v1 Lease: what to do next, decided without I/O.

The rules are client-go's (tools/leaderelection): a Lease whose holder is empty, or that nobody has
renewed for ``leaseDurationSeconds`` *as this process observed it*, may be taken; the holder renews
every retry period and gives up once it has not renewed for the renew deadline. Expiry is measured
from when this process first saw the record unchanged (``seen_since``), not from the record's
renewTime, so clock skew between nodes cannot make a follower take a live lease early.
Released (on SIGTERM) = holder empty and a 1 s duration, so a follower takes over at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any

MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime, as the Lease spec stores times


@dataclass(frozen=True)
class LeaseTimings:
    """leaseDuration > renewDeadline > retryPeriod, as client-go requires (it panics otherwise)."""

    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.duration_s:
            raise ValueError(f"leader election needs 0 < retry ({self.retry_s}s) < renew deadline "
                             f"({self.renew_deadline_s}s) < lease duration ({self.duration_s}s)")


@dataclass(frozen=True)
class LeaseRecord:
    """The spec of a Lease, the part leader election reads and writes."""

    holder: str  # "" once released
    duration_s: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0


class Verdict(Enum):
    ACQUIRE = "acquire"  # write ``Decision.write``; on success this process leads
    RENEW = "renew"      # write ``Decision.write``; on success the deadline moves on
    WAIT = "wait"        # someone else leads: look again after the retry period
    LOST = "lost"        # this process led and may no longer: stop acting at once


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    write: LeaseRecord | None = None


def decide(current: LeaseRecord | None, me: str, now: datetime, seen_since: datetime,
           timings: LeaseTimings, last_renewed: datetime | None = None) -> Decision:
    """The next step for process ``me`` given the Lease as read (None: no Lease yet).

    ``seen_since``: when this process first read ``current`` unchanged; ``last_renewed``: when
    this process last wrote the Lease as leader (None while it is not leading).
    """
    leading = last_renewed is not None
    if renew_overdue(last_renewed, now, timings):
        return Decision(Verdict.LOST)
    if current is None:
        return Decision(Verdict.ACQUIRE, LeaseRecord(me, _whole_seconds(timings.duration_s), now, now, 0))
    if current.holder == me:
        return Decision(Verdict.RENEW, replace(current, renew_time=now,
                                               duration_s=_whole_seconds(timings.duration_s)))
    if leading:
        return Decision(Verdict.LOST)  # someone else wrote it: they lead now
    expired = (now - seen_since).total_seconds() >= current.duration_s
    if not current.holder or expired:
        return Decision(Verdict.ACQUIRE, LeaseRecord(me, _whole_seconds(timings.duration_s), now, now,
                                                     current.transitions + 1))
    return Decision(Verdict.WAIT)


def renew_overdue(last_renewed: datetime | None, now: datetime, timings: LeaseTimings) -> bool:
    """The leader has not renewed for the renew deadline: it must stop acting (also when the API is down)."""
    return last_renewed is not None and (now - last_renewed).total_seconds() > timings.renew_deadline_s


def released(current: LeaseRecord, now: datetime) -> LeaseRecord:
    """What the leader writes on SIGTERM (client-go's ReleaseOnCancel): a follower acquires at once."""
    return replace(current, holder="", duration_s=1, renew_time=now)


def _whole_seconds(seconds: float) -> int:
    return max(1, round(seconds))  # leaseDurationSeconds is an integer


def record_from_spec(spec: dict[str, Any] | None) -> LeaseRecord:
    """A Lease's spec (camelCase, as the API returns it) as a record; missing fields are empty."""
    spec = spec or {}
    return LeaseRecord(holder=spec.get("holderIdentity") or "",
                       duration_s=int(spec.get("leaseDurationSeconds") or 0),
                       acquire_time=_parse_time(spec.get("acquireTime")),
                       renew_time=_parse_time(spec.get("renewTime")),
                       transitions=int(spec.get("leaseTransitions") or 0))


def spec_from_record(record: LeaseRecord) -> dict[str, Any]:
    return {"holderIdentity": record.holder, "leaseDurationSeconds": record.duration_s,
            "acquireTime": _format_time(record.acquire_time), "renewTime": _format_time(record.renew_time),
            "leaseTransitions": record.transitions}


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _format_time(value: datetime | None) -> str | None:
    return None if value is None else value.strftime(MICROTIME)


def user_agent(version: str, identity: str) -> str:
    """The User-Agent of every request of one operator process: the audit log tells replicas apart."""
    return f"tide-operator/{version} ({identity})"


def holder_identity(pod_name: str, suffix: str) -> str:
    """Pod name plus a random suffix: a restarted container of the same pod is a new holder."""
    return f"{pod_name}_{suffix}"

