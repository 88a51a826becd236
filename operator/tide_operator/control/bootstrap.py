"""Start without a draft: what a pass does about the bootstrap head (pure).

A TideDeployment without ``spec.draft.initial`` has nothing for its pods' ``--speculative-config``, and
a pod launched without one computes no auxiliary hidden states, so capture would record nothing and
the lifecycle would wait in Collecting forever. So the operator runs ``tide_trainer init`` once per
target revision (a Job on the training pool) and launches the pods with the freshly initialised head
at K=0 at every batch size: no token is drafted, but capture flows. Until the head exists the pods
serve without speculation and the control pass waits (its switches need a launched draft).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tide_operator.api.conditions import Reason


class InitJob(StrEnum):
    ABSENT = "Absent"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class BootstrapStep:
    ready: bool  # launch the pods with the head (and let the control pass run)
    create_job: bool
    reason: str
    message: str
    failed: bool = False


def bootstrap_step(*, launched: bool, job: InitJob, location: str, job_name: str, detail: str = "") -> BootstrapStep:
    """``launched``: the live Deployment already runs the head at ``location`` (its Job may be gone)."""
    if launched or job is InitJob.SUCCEEDED:
        return BootstrapStep(True, False, Reason.BOOTSTRAP_DRAFT_LAUNCHED,
                             f"pods launch with the bootstrap head {location} at K=0 (no token drafted; capture "
                             "works) until a trained draft is promoted")
    if job is InitJob.ABSENT:
        return BootstrapStep(False, True, Reason.BOOTSTRAP_JOB_RUNNING,
                             f"no spec.draft.initial: init Job {job_name} writes a fresh head to {location}; "
                             "serving without speculation meanwhile")
    if job is InitJob.RUNNING:
        return BootstrapStep(False, False, Reason.BOOTSTRAP_JOB_RUNNING,
                             f"waiting for init Job {job_name} ({location}); serving without speculation")
    return BootstrapStep(False, False, Reason.BOOTSTRAP_JOB_FAILED,
                         f"init Job {job_name} failed{': ' + detail if detail else ''}; serving without speculation "
                         f"and without capture; delete the Job to try again", failed=True)


def init_job_state(job: dict[str, Any] | None) -> tuple[InitJob, str]:
    """The init Job's state from its status, and the Job controller's words when it failed."""
    if job is None:
        return InitJob.ABSENT, ""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return InitJob.FAILED, f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
        if condition.get("type") == "Complete" and condition.get("status") == "True":
            return InitJob.SUCCEEDED, ""
    if status.get("succeeded"):
        return InitJob.SUCCEEDED, ""
    return InitJob.RUNNING, ""
