"""The bootstrap head's I/O for a reconcile pass: read and create the init Job, say so in status.

Decisions are control/bootstrap.py's; this module reads the Job, creates it when the decision asks
(owned, deterministic name: a restart finds it), and writes the BootstrapDraftReady condition (plus
Degraded with a Warning Event when every attempt failed). Nothing here touches S3: a head the live
Deployment already launched with is known from its annotation, so a Job deleted by a TTL changes nothing.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.rest import ApiException

from tide_operator.adapters.cluster import Cluster
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.conditions import ConditionType, Reason
from tide_operator.api.status import ConditionStatus, TideDeploymentStatus
from tide_operator.config import OperatorConfig
from tide_operator.control.bootstrap import bootstrap_step, init_job_state
from tide_operator.control.placement import Placement
from tide_operator.manifests import names
from tide_operator.manifests.ownership import ChildConflict
from tide_operator.manifests.serving import bootstrap_draft_of
from tide_operator.manifests.trainer import bootstrap_location, build_bootstrap_job
from tide_operator.passes.serving_status import StatusDraft


def ensure_bootstrap(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement,
                     config: OperatorConfig, cluster: Cluster, adopt: Any, draft: StatusDraft,
                     deployment: dict[str, Any] | None) -> str | None:
    """The bootstrap head to launch the pods with, or None (not needed, or not written yet)."""
    if spec.draft.initial is not None:
        _not_needed(draft)
        return None
    location = bootstrap_location(name, namespace, spec)
    job_name = names.bootstrap_job_name(name, spec.target.revision)
    launched = bootstrap_draft_of(deployment) == location
    job = None if launched else cluster.read("Job", namespace, job_name)
    state, detail = init_job_state(job)
    step = bootstrap_step(launched=launched, job=state, location=location, job_name=job_name, detail=detail)
    if not launched and not _init_job(name, namespace, spec, placement, config, cluster, adopt, draft, job):
        return None
    draft.condition(ConditionType.BOOTSTRAP_DRAFT_READY, step.ready, step.reason, step.message, warn=step.failed)
    if step.failed:
        draft.condition(ConditionType.DEGRADED, True, Reason.BOOTSTRAP_JOB_FAILED, step.message, warn=True)
    elif _degraded_by_bootstrap(draft.status):
        draft.condition(ConditionType.DEGRADED, False, Reason.AS_EXPECTED, "the init Job no longer fails")
    return location if step.ready else None


def _init_job(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement, config: OperatorConfig,
              cluster: Cluster, adopt: Any, draft: StatusDraft, live: dict[str, Any] | None) -> bool:
    """Create the init Job if absent and check that a present one is ours; False (and Degraded) if not."""
    try:
        cluster.create_owned(adopt(build_bootstrap_job(name, namespace, spec, placement, config)), live)
    except ChildConflict as e:
        reason, message = Reason.CHILD_CONFLICT, str(e)
    except ValueError as e:  # the Job cannot be built from this spec and config: say which part
        reason, message = Reason.TRAINER_JOB_INVALID, f"init Job: {e}"
    except ApiException as e:
        reason, message = Reason.KUBERNETES_API_ERROR, f"init Job: {e.reason}"
    else:
        return True
    draft.condition(ConditionType.BOOTSTRAP_DRAFT_READY, False, reason, message, warn=True)
    draft.condition(ConditionType.DEGRADED, True, reason, message, warn=True)
    return False


def bootstrap_pending(status: TideDeploymentStatus) -> bool:
    """The control pass waits while the pods have no head to switch or capture with."""
    return any(c.type == ConditionType.BOOTSTRAP_DRAFT_READY and c.status is ConditionStatus.FALSE
               for c in status.conditions)


def _not_needed(draft: StatusDraft) -> None:
    """A deployment given spec.draft.initial after it bootstrapped: the old condition must not hold it."""
    if any(c.type == ConditionType.BOOTSTRAP_DRAFT_READY for c in draft.status.conditions):
        draft.condition(ConditionType.BOOTSTRAP_DRAFT_READY, True, Reason.BOOTSTRAP_NOT_NEEDED,
                        "spec.draft.initial is set: the pods launch with it")


def _degraded_by_bootstrap(status: TideDeploymentStatus) -> bool:
    return any(c.type == ConditionType.DEGRADED and c.status is ConditionStatus.TRUE
               and (c.reason == Reason.BOOTSTRAP_JOB_FAILED or c.message.startswith("init Job"))
               for c in status.conditions)
