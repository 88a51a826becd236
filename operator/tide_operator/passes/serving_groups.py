"""Serving groups in the reconcile pass (inference.servingGroups): each group's Deployment reported, and
the serving Deployments that leave scaled down as those that stay become ready, then deleted.

What leaves: the one Deployment (<name>-vllm) once groups are on, a class out of the groups, every group
once they are off (the one Deployment is back). control/serving_groups.py says how many replicas they
keep; status.servingGroups keeps a retiring group listed, so a later pass (or another leader) finds it.
Only Deployments with our owner UID are scaled or deleted; one that fails stays, the next pass retries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from tide_operator.adapters.cluster import Cluster
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.status import ServingGroupStatus
from tide_operator.control.placement import Placement
from tide_operator.control.serving_groups import retiring_replicas
from tide_operator.manifests import names
from tide_operator.manifests.ownership import ChildConflict, conflict
from tide_operator.passes.serving_status import EventNote, StatusDraft


def serving_names(name: str, placement: Placement) -> list[str]:
    """The serving Deployments this pass wants: one per group, else the one."""
    return [names.group_serving_name(name, g.choice.gpu_class.name) for g in placement.groups
            if g.choice.gpu_class is not None] or [names.serving_name(name)]


def launched_deployment(name: str, placement: Placement,
                        read: Callable[[str], dict[str, Any] | None]) -> dict[str, Any] | None:
    """The live serving Deployment (by ``read``) whose launch settings (bootstrap draft, bands) the others
    carry: a wanted one, else the one Deployment that groups replace (a migration launches pods the same way)."""
    for dep in [*serving_names(name, placement), names.serving_name(name)]:
        if (live := read(dep)) is not None:
            return live
    return None


def retiring(name: str, spec: TideDeploymentSpec,
             before: tuple[ServingGroupStatus, ...]) -> list[tuple[str | None, str]]:
    """(class, Deployment) of the serving Deployments that leave; class None: the one Deployment."""
    wanted = {g.gpu_class.lower() for g in spec.inference.serving_groups}
    out: list[tuple[str | None, str]] = [(None, names.serving_name(name))] if wanted else []
    return out + [(g.gpu_class, g.deployment) for g in before if g.gpu_class.lower() not in wanted]


def converge_serving(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement, cluster: Cluster,
                     owner_uid: str, draft: StatusDraft) -> int | None:
    """Report the groups and retire what leaves; the ready replicas of every serving Deployment (None
    without groups now or before: the one Deployment's, read by the caller)."""
    before = draft.status.serving_groups or ()
    if not placement.groups and not before:
        return None
    total = spec.inference.replicas
    staying = {dep: _ready(cluster.deployment(namespace, dep)) for dep in serving_names(name, placement)}
    ready_staying = sum(staying.values())
    leaving = [(cls, dep, live) for cls, dep in retiring(name, spec, before)
               if (live := cluster.deployment(namespace, dep)) is not None
               and conflict(owner_uid, "Deployment", live) is None]
    keep = retiring_replicas(total, ready_staying, sum(_replicas(live) for _, _, live in leaving))
    kept: list[ServingGroupStatus] = []
    ready_leaving = 0
    for cls, dep, live in leaving:
        share = min(_replicas(live), keep)
        keep -= share
        if _retire(namespace, dep, share, cluster, owner_uid, draft) and cls is not None:
            kept.append(ServingGroupStatus(gpu_class=cls, deployment=dep, replicas=share,
                                           replicas_ready=_ready(live), retiring=True))
        ready_leaving += _ready(live) if share else 0
    groups = [ServingGroupStatus(gpu_class=g.choice.gpu_class.name, deployment=dep, replicas=g.replicas,
                                 replicas_ready=staying.get(dep, 0))
              for g in placement.groups if g.choice.gpu_class is not None
              for dep in (names.group_serving_name(name, g.choice.gpu_class.name),)]
    draft.update(serving_groups=tuple(groups + kept) or None)
    return ready_staying + ready_leaving


def _retire(namespace: str, deployment: str, replicas: int, cluster: Cluster, owner_uid: str,
            draft: StatusDraft) -> bool:
    """Scale ``deployment`` to ``replicas``, or delete it at zero; True while it stays."""
    try:
        if replicas > 0:
            cluster.scale_owned(namespace, deployment, replicas, owner_uid)
            return True
        cluster.delete_owned("Deployment", namespace, deployment, owner_uid)
    except ChildConflict:
        return False  # not ours (made by someone else since): never touched, no longer tracked
    except ApiException as e:
        draft.events.append(EventNote("Warning", "ServingRetireFailed", f"Deployment {deployment} not scaled "
                                      f"down, again next pass: {e.status} {e.reason}"))
        return True
    draft.events.append(EventNote("Normal", "ServingRetired", f"Deployment {deployment} deleted: the serving "
                                  "Deployments that stay took its replicas"))
    return False


def _ready(deployment: dict[str, Any] | None) -> int:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)


def _replicas(deployment: dict[str, Any]) -> int:
    return int((deployment.get("spec") or {}).get("replicas") or 0)
