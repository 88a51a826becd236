"""One linear reconcile pass: parse the spec, choose pools, apply children, report status.

Like jobset's Reconcile: each step returns early on a problem, the status is built once and
written once by the handler, and nothing already running is touched while the spec is invalid.
Missing GPU capacity is not such a problem: the children are applied and their pods wait Pending
for the scheduler, or for an autoscaler that adds nodes because it sees them (Scheduled=False,
WaitingForCapacity).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tide_operator.adapters.cluster import Applied, Cluster
from tide_operator.adapters.cost_profile_source import ProfilePoints, read_cost_profile, read_group_profiles
from tide_operator.adapters.prometheus_adapter import PrometheusAdapters
from tide_operator.adapters.prometheus_credentials import prometheus_refusal
from tide_operator.api import SpecError, TideDeploymentSpec, TideDeploymentStatus, parse_spec
from tide_operator.api.conditions import Reason
from tide_operator.api.status import Phase
from tide_operator.config import OperatorConfig
from tide_operator.control.actions import Bands
from tide_operator.control.lifecycle import run_id_for
from tide_operator.control.manual import manual_request
from tide_operator.control.placement import Placement, PoolRequest, choose_group_pools, choose_pools
from tide_operator.control.pod_policy import pod_policy_violations
from tide_operator.control.policy import PolicyState
from tide_operator.control.serving_groups import GroupRequest, group_requests, vendor_problem
from tide_operator.control.storage_tenancy import storage_violations, with_storage_defaults
from tide_operator.manifests import labels, names
from tide_operator.manifests.control_token import control_token_secret, rotation_request, tokens_of
from tide_operator.manifests.disruption import KIND as DISRUPTION_BUDGET
from tide_operator.manifests.disruption import build_disruption_budget
from tide_operator.manifests.ownership import ChildConflict, conflict, describe
from tide_operator.manifests.serving import (
    bootstrap_draft_of,
    build_service,
    build_serving_configmap,
    launch_bands_of,
    launch_bands_with,
)
from tide_operator.manifests.serving_fleet import serving_deployments
from tide_operator.passes.bootstrap_draft import bootstrap_pending, ensure_bootstrap
from tide_operator.passes.control_step import run_control
from tide_operator.passes.serving_groups import converge_serving, launched_deployment
from tide_operator.passes.serving_status import (
    EventNote,
    ServingObservation,
    StatusDraft,
    child_conflict,
    children_owned,
    invalid,
    scheduled,
    serving,
)
from tide_operator.passes.serving_status import unscheduled as mark_unscheduled


@dataclass(frozen=True)
class PassResult:
    status: dict[str, Any]
    events: tuple[EventNote, ...]
    applied: tuple[Applied, ...] = ()
    consumed: tuple[str, ...] = ()  # one-shot request annotations this pass acted on: the handler removes them


def reconcile(body: dict[str, Any], cluster: Cluster, config: OperatorConfig, adopt: Any,
              adapters: PrometheusAdapters | None = None, now: datetime | None = None) -> PassResult:
    meta = body["metadata"]
    name, namespace, generation = meta["name"], meta["namespace"], int(meta.get("generation", 1))
    draft = StatusDraft(observed_status(body), generation, now or datetime.now(UTC))
    try:
        spec = parse_spec(body.get("spec"), config.catalog.names())
    except SpecError as e:
        invalid(draft, Reason.INVALID_SPEC, e.field, e.message)
        return _result(draft)
    refusal = (policy_refusal(spec, namespace, name, config)
               or prometheus_refusal(spec.prometheus, namespace, config, cluster))
    if refusal:
        invalid(draft, refusal[0], *_summary(refusal[1]))
        return _result(draft)
    spec = with_storage_defaults(spec, config.storage)
    profiles, missing = _referenced(spec, namespace, cluster)
    if missing:
        invalid(draft, *missing)
        return _result(draft)

    placement = _place(spec, cluster, config, namespace, name, draft.status)
    if not placement.inference.ok:  # no class allowed at all; without free GPUs the pass goes on
        mark_unscheduled(draft, placement)
        return _result(draft)
    scheduled(draft, placement)

    owned = _own_and_apply(meta, spec, placement, config, cluster, adopt, draft)
    if owned is None:
        return _result(draft)
    applied, control_tokens = owned
    ready = converge_serving(name, namespace, spec, placement, cluster, meta.get("uid", ""), draft)
    if ready is None:
        observed = (cluster.deployment(namespace, names.serving_name(name)) or {}).get("status") or {}
        ready = int(observed.get("readyReplicas") or 0)
    serving(draft, ServingObservation(replicas=spec.inference.replicas, ready_replicas=ready,
                                      selector=labels.serving_selector(name)))
    if adapters is not None and draft.status.phase is Phase.SERVING and not bootstrap_pending(draft.status):
        run_control(name, namespace, spec, placement, draft, cluster, config, adopt, adapters,
                    profile_points=profiles[0], group_profiles=profiles[1],
                    manual=manual_request(meta.get("annotations")),
                    control_tokens=control_tokens)
    return _result(draft, applied)


def _referenced(spec: TideDeploymentSpec, namespace: str, cluster: Cluster,
                ) -> tuple[tuple[ProfilePoints | None, dict[str, ProfilePoints]], tuple[str, str, str] | None]:
    """The cost profiles the spec references (control.costProfile's, each serving group's by class), or
    (reason, field, message) of a referenced object that is missing or unreadable (nothing is written then)."""
    secret = spec.storage.s3.credentials_secret
    if secret and not cluster.secret_exists(namespace, secret):
        return (None, {}), (Reason.MISSING_CREDENTIALS, "spec.storage.s3.credentialsSecret",
                            f"Secret {namespace}/{secret} not found")
    try:
        return (read_cost_profile(spec, namespace, cluster), read_group_profiles(spec, namespace, cluster)), None
    except SpecError as e:
        return (None, {}), (Reason.INVALID_SPEC, e.field, e.message)


def policy_refusal(spec: TideDeploymentSpec, namespace: str, name: str,
                   config: OperatorConfig) -> tuple[str, list[tuple[str, str]]] | None:
    """The pod policy's refusal, else storage tenancy's (reason, problems); None when admitted.

    Both run before any cluster or S3 call: a refused spec never lends the operator's identity.
    """
    refused = pod_policy_violations(spec, config)
    if refused:
        return Reason.POD_POLICY_VIOLATION, refused
    refused = storage_violations(spec, namespace, name, config.storage)
    if refused:
        return Reason.STORAGE_POLICY_VIOLATION, refused
    mixed = vendor_problem(_group_requests(spec, config), spec.inference.image)
    return (Reason.INVALID_SPEC, [("spec.inference.image", mixed)]) if mixed else None


def _group_requests(spec: TideDeploymentSpec, config: OperatorConfig) -> tuple[GroupRequest, ...]:
    return group_requests(spec.inference.serving_groups, config.catalog, spec.inference.gpus_per_replica)


def child_names(name: str, status: TideDeploymentStatus, uid: str,
                group_classes: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(kind, name) of every child a reconcile pass writes, and of the next run's Job of either kind.

    The control pass creates that Job later (and checks it again); a namesake is found now, before
    a training run, or the draft pool's recall evaluation (issue 16), depends on it.
    """
    stored = status.control_state
    run_counter = PolicyState.from_dict(stored).lifecycle.run_counter if stored else 0
    next_run = run_id_for(run_counter + 1, uid)
    return [("Secret", names.control_token_secret_name(name)), ("ConfigMap", names.serving_config_name(name)),
            ("Service", names.serving_name(name)), ("Deployment", names.serving_name(name)),
            (DISRUPTION_BUDGET, names.disruption_budget_name(name)),
            ("Job", names.trainer_job_name(name, next_run)), ("Job", names.evaluation_job_name(name, next_run)),
            *(("Deployment", names.group_serving_name(name, c)) for c in group_classes)]


def _own_and_apply(meta: dict[str, Any], spec: TideDeploymentSpec, placement: Placement, config: OperatorConfig,
                   cluster: Cluster, adopt: Any, draft: StatusDraft,
                   ) -> tuple[tuple[Applied, ...], tuple[str, ...]] | None:
    """Apply the children, or None with a ChildConflict when an object named like one is not ours.

    Also the control tokens of the Secret just applied (the pods' calls use them, rotated or kept)."""
    name, namespace = meta["name"], meta["namespace"]
    live = {(kind, child): cluster.read(kind, namespace, child)
            for kind, child in child_names(name, draft.status, meta.get("uid", ""),
                                           tuple(g.gpu_class for g in spec.inference.serving_groups))}
    found = [c for (kind, _), obj in live.items() if (c := conflict(meta.get("uid", ""), kind, obj))]
    if found:  # checked before any write: none of our own children changes while a name is taken
        child_conflict(draft, describe(found))
        return None
    children_owned(draft)
    # Without spec.draft.initial: the bootstrap head, once its init Job wrote it (bootstrap_draft.py).
    bootstrap = ensure_bootstrap(name, namespace, spec, placement, config, cluster, adopt, draft,
                                 launched_deployment(name, placement, lambda dep: live.get(("Deployment", dep))))
    try:
        token = control_token_secret(name, namespace, live[("Secret", names.control_token_secret_name(name))],
                                     rotation_request(meta), draft.now, config.serving.token_rotation_grace_seconds)
        applied = _apply_children(name, namespace, spec, placement, config, cluster, adopt, live, token, bootstrap)
        return applied + _apply_disruption_budget(meta, spec, cluster, adopt, live), tokens_of(token)
    except ChildConflict as e:  # lost a race to someone else's object between the read and the write
        child_conflict(draft, str(e))
        return None


def _apply_children(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement,
                    config: OperatorConfig, cluster: Cluster, adopt: Any,
                    live: dict[tuple[str, str], dict[str, Any] | None], token: dict[str, Any],
                    bootstrap: str | None = None) -> tuple[Applied, ...]:
    # The control token is kept, or rotated once per new tide.dev/rotate-token value (pods re-read it).
    cluster.apply(adopt(token), live[("Secret", token["metadata"]["name"])])
    # Pods that cannot switch speculation at runtime were rolled with the policy's table: keep it.
    deployment = launched_deployment(name, placement, lambda dep: live.get(("Deployment", dep)))
    bands = launch_bands_with(launch_bands_of(deployment), bootstrap, bootstrap_draft_of(deployment))
    return tuple(cluster.apply(child, live[(child["kind"], child["metadata"]["name"])])
                 for child in map(adopt, _children(name, namespace, spec, placement, config, bands,
                                                                         bootstrap)))


def _apply_disruption_budget(meta: dict[str, Any], spec: TideDeploymentSpec, cluster: Cluster, adopt: Any,
                             live: dict[tuple[str, str], dict[str, Any] | None]) -> tuple[Applied, ...]:
    """The serving pods' PodDisruptionBudget, or its removal once the spec disables it."""
    name, namespace = meta["name"], meta["namespace"]
    child = names.disruption_budget_name(name)
    desired = build_disruption_budget(name, namespace, spec, cluster.disruption_budget_api_version())
    if desired is not None:
        return (cluster.apply(adopt(desired), live[(DISRUPTION_BUDGET, child)]),)
    if live[(DISRUPTION_BUDGET, child)] is not None and cluster.delete_owned(DISRUPTION_BUDGET, namespace, child,
                                                                               meta.get("uid", "")):
        return (Applied(DISRUPTION_BUDGET, child, "deleted"),)
    return ()


def _summary(refused: list[tuple[str, str]]) -> tuple[str, str]:
    """The first refused field with its reason, then the paths of the others."""
    (field, message), others = refused[0], [path for path, _ in refused[1:]]
    return field, message + (f"; also refused: {', '.join(others)}" if others else "")


def observed_status(body: dict[str, Any]) -> TideDeploymentStatus:
    """The status as last written (strict models read JSON, where enums arrive as strings)."""
    raw = {k: v for k, v in (body.get("status") or {}).items() if k in STATUS_FIELDS}
    return TideDeploymentStatus.model_validate_json(json.dumps(raw))


STATUS_FIELDS = {field.alias or name for name, field in TideDeploymentStatus.model_fields.items()}


def _place(spec: TideDeploymentSpec, cluster: Cluster, config: OperatorConfig, namespace: str, name: str,
           status: TideDeploymentStatus) -> Placement:
    nodes = cluster.node_inventory(exclude=(namespace, name))
    training = PoolRequest(allowed=spec.training.gpu_classes or None, units=1,
                           gpus_per_unit=spec.training.gpus_per_job)
    if groups := _group_requests(spec, config):
        # The split as last applied: a replica moves only where its class cannot place it.
        current = {g.gpu_class: g.replicas for g in status.serving_groups or () if not g.retiring}
        return choose_group_pools(nodes, config.catalog, groups, spec.inference.replicas, training, current)
    inference = PoolRequest(allowed=spec.inference.gpu_classes or None, units=spec.inference.replicas,
                            gpus_per_unit=spec.inference.gpus_per_replica)
    current = status.inference_pool.gpu_class if status.inference_pool else None
    placed = _placed(cluster.pods(namespace, labels.serving_selector(name)), current) if current else 0
    return choose_pools(nodes, config.catalog, inference, training, current, placed)


def _placed(pods: list[dict[str, Any]], gpu_class: str) -> int:
    """Serving pods of ``gpu_class`` bound to a node and staying there (not finished, not being deleted)."""
    return sum(1 for p in pods
               if (p["metadata"].get("labels") or {}).get(labels.GPU_CLASS_LABEL) == gpu_class
               and (p.get("spec") or {}).get("nodeName") and not p["metadata"].get("deletionTimestamp")
               and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def _children(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement,
              config: OperatorConfig, launch_bands: Bands | None = None,
              bootstrap: str | None = None) -> list[dict[str, Any]]:
    return [build_serving_configmap(name, namespace, spec, bootstrap, launch_bands=launch_bands),
            build_service(name, namespace, spec),
            *serving_deployments(name, namespace, spec, placement, config, bootstrap_draft=bootstrap,
                                 launch_bands=launch_bands)]


def _result(draft: StatusDraft, applied: tuple[Applied, ...] = ()) -> PassResult:
    return PassResult(draft.status.model_dump(by_alias=True, exclude_none=True, mode="json"),
                      tuple(draft.events), applied, tuple(draft.consumed_requests))
