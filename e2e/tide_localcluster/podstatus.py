"""The pod status a kubelet reports, computed from what its processes are doing (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GATES_NOT_READY = "ReadinessGatesNotReady"  # the Ready condition's reason while a readiness gate is closed


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerView:
    """One container as the status reports it."""

    name: str
    image: str
    pid: int | None = None
    ready: bool = False
    restart_count: int = 0
    running_since: dt.datetime | None = None
    waiting: tuple[str, str] | None = None  # (reason, message)
    terminated: dict[str, Any] | None = None
    last_terminated: dict[str, Any] | None = None

    def to_status(self) -> dict[str, Any]:
        if self.running_since is not None:
            state: dict[str, Any] = {"running": {"startedAt": rfc3339(self.running_since)}}
        elif self.terminated is not None:
            state = {"terminated": self.terminated}
        else:
            reason, message = self.waiting or ("ContainerCreating", "")
            state = {"waiting": {"reason": reason, "message": message}}
        out = {"name": self.name, "image": self.image, "imageID": "", "ready": self.ready,
               "restartCount": self.restart_count, "started": self.running_since is not None, "state": state,
               "containerID": f"process://{self.pid}" if self.pid else None}
        if self.last_terminated:
            out["lastState"] = {"terminated": self.last_terminated}
        return {k: v for k, v in out.items() if v is not None}


def readiness_gates(pod_spec: dict[str, Any]) -> tuple[str, ...]:
    """The condition types spec.readinessGates names: each must be True on the pod for it to be Ready."""
    return tuple(gate["conditionType"] for gate in pod_spec.get("readinessGates") or [])


def closed_gate(gates: tuple[str, ...], conditions: Mapping[str, str]) -> tuple[str, str] | None:
    """(reason, message) for the first gate that holds the pod back, as the kubelet words it; None if all are open.

    ``conditions`` maps the pod's condition types to their status on the API. A gate whose condition is
    absent is closed: Kubernetes' rule, so a pod is not Ready before its controller has said anything.
    """
    for gate in gates:
        status = conditions.get(gate)
        if status is None:
            return GATES_NOT_READY, f'corresponding condition of pod readiness gate "{gate}" does not exist.'
        if status != "True":
            return GATES_NOT_READY, f'the status of pod readiness gate "{gate}" is not "True", but {status}'
    return None


def terminated(exit_code: int, started: dt.datetime | None, finished: dt.datetime) -> dict[str, Any]:
    return {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": rfc3339(started or finished), "finishedAt": rfc3339(finished)}


@dataclass
class PodView:
    pod_ip: str
    started: dt.datetime
    restart_policy: str
    containers: list[ContainerView] = field(default_factory=list)
    initialized: bool = False
    init_failed: bool = False
    readiness_gates: tuple[str, ...] = ()
    # The pod's conditions as last seen on the API (type -> status); others (the operator) set the gates' ones.
    api_conditions: Mapping[str, str] = field(default_factory=dict)

    def phase(self) -> str:
        if self.init_failed:
            return "Failed"
        states = [c.terminated for c in self.containers]
        if all(states):
            codes = [s["exitCode"] for s in states if s]
            return "Succeeded" if all(code == 0 for code in codes) else "Failed"
        if any(c.running_since or c.terminated for c in self.containers):
            return "Running"
        return "Pending"

    def to_status(self, transition: dt.datetime) -> dict[str, Any]:
        """The status to patch. Its conditions are only the kubelet's own: a strategic merge patch
        (merged by type) leaves every other condition on the pod, a readiness gate's included."""
        containers_ready = self.phase() == "Running" and all(c.ready for c in self.containers)
        held_back = closed_gate(self.readiness_gates, self.api_conditions) if containers_ready else None

        def cond(kind: str, ok: bool, why: tuple[str, str] | None = None) -> dict[str, Any]:
            # reason and message go back to null once Ready: a merge by type would keep stale ones
            reason, message = why or (None, None)
            return {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(transition), "reason": reason, "message": message}

        return {
            "phase": self.phase(), "hostIP": "127.0.0.1", "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}], "startTime": rfc3339(self.started),
            "conditions": [cond("Initialized", self.initialized),
                           cond("Ready", containers_ready and held_back is None, held_back),
                           cond("ContainersReady", containers_ready)],
            "containerStatuses": [c.to_status() for c in self.containers],
        }
