"""Assemble one control pass for a serving TideDeployment: sensors, fleet, registry, effects.

Runs at most once per spec.control.interval (the resync timer may be faster), so decisions and
their status writes follow the control interval, not the drift-repair cadence. The time of the
last run is kept in memory, not in status: a status write per interval would make every pass a
write even when nothing changed; after an operator restart the first pass simply runs at once.
The capture buffer is pruned on its own timer (capture_retention.py), not here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tide_contracts.draft_copy import DEFAULT_MULTIPART_COPY_THRESHOLD
from tide_contracts.registry import CaptureSampleCache, DraftRegistry
from tide_contracts.registry_pool import PoolCache
from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.cost_profile_source import ProfilePoints
from tide_operator.adapters.fleet import Fleet, ServingPod
from tide_operator.adapters.prometheus_adapter import PrometheusAdapters
from tide_operator.adapters.prometheus_credentials import resolve_connection
from tide_operator.adapters.s3_clients import CLIENTS as S3_CLIENTS
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.units import duration_seconds
from tide_operator.config import OperatorConfig
from tide_operator.control.cost_model import CostProfile
from tide_operator.control.manual import ManualRequest
from tide_operator.control.placement import Placement
from tide_operator.control.policy import PolicyState
from tide_operator.control.prometheus_access import CredentialsError
from tide_operator.control.spec_params import fleet_max_batch_size, policy_params
from tide_operator.manifests import labels
from tide_operator.manifests.ownership import owner_uids
from tide_operator.manifests.pod import registry_prefix, s3_encryption
from tide_operator.passes.control_loop import SensorReading, control_pass
from tide_operator.passes.draft_pool_index import forget as forget_served
from tide_operator.passes.draft_pool_index import note_served
from tide_operator.passes.effects import ClusterEffects
from tide_operator.passes.lending import Lending, lend
from tide_operator.passes.routing import route, routing_of
from tide_operator.passes.sensors import read_sensors
from tide_operator.passes.serving_status import StatusDraft

_LAST_RUN: dict[tuple[str, str], float] = {}
# Samples per capture object, per TideDeployment: each pass lists the buffer, and only objects
# new since the last pass cost a HEAD (in memory: after a restart the first pass reads them all).
_SAMPLE_CACHES: dict[tuple[str, str], CaptureSampleCache] = {}
_POOL_CACHES: dict[tuple[str, str], PoolCache] = {}


def due(namespace: str, name: str, spec: TideDeploymentSpec, now_s: float) -> bool:
    last = _LAST_RUN.get((namespace, name))
    return last is None or now_s - last >= duration_seconds(spec.control.interval)


def run_control(name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement, draft: StatusDraft,
                cluster: Cluster, config: OperatorConfig, adopt: Any, adapters: PrometheusAdapters,
                profile_points: ProfilePoints | None = None, manual: ManualRequest | None = None, *,
                control_tokens: tuple[str, ...], group_profiles: Mapping[str, ProfilePoints] | None = None) -> None:
    """``profile_points``: the cost profile read from spec.control.costProfile.configMapRef, if any;
    ``group_profiles``: each serving group's own profile by class (inference.servingGroups[].costProfile).

    ``manual``: a user's requests (control/manual.py); a pass runs at once for them, due or not.
    ``control_tokens``: the pods' control tokens, current first, from the Secret the reconcile pass applied.
    """
    now_s = time.time()
    if not due(namespace, name, spec, now_s) and not (manual is not None and manual.keys):
        return
    _LAST_RUN[(namespace, name)] = now_s
    stored = draft.status.control_state
    state = PolicyState.from_dict(stored) if stored else PolicyState()
    registry = make_registry(name, namespace, spec, cluster,
                             multipart_copy_threshold=config.promotion.multipart_copy_threshold_bytes)
    fleet = make_fleet(name, namespace, config, cluster, control_tokens)
    reading = _sensor_reading(name, namespace, spec, state, registry, cluster, config, adapters)
    canary_class = placement.inference.gpu_class.name if placement.groups and placement.inference.gpu_class else None
    reading, max_batch_size = _with_fleet(reading, fleet, state, canary_class)
    owner_uid = next(iter(owner_uids(adopt({"metadata": {}}))), "")  # the UID adopt writes into our children
    effects = ClusterEffects(name, namespace, spec, placement, config, cluster, fleet, registry, adopt,
                             class_profiles={c: CostProfile.from_spec_points(points)
                                             for c, points in (group_profiles or {}).items()})
    params = policy_params(spec, profile_points, max_batch_size=max_batch_size,
                           # a change shows in full once its window has passed and the readings settled
                           observation_window_s=config.prometheus_window_seconds + config.prometheus_settle_seconds,
                           deployment_uid=owner_uid)
    routing, route_api = routing_of(spec, cluster)
    reading = lend(name, namespace, spec, placement, draft, state, params, reading,
                   Lending(cluster, config, adopt, routing=routing), now_s)
    route(name, namespace, spec, placement, draft, cluster, config.catalog, adopt, owner_uid, route_api)
    if reading.observation is not None:  # what serves, as read before this pass changes it (a pin, a flip)
        draft.events.extend(note_served(registry, spec, (namespace, name), reading.observation.promoted_version,
                                        datetime.now(UTC)))
    control_pass(draft, params, reading, effects, now_s, manual)


def _with_fleet(reading: SensorReading, fleet: Fleet, state: PolicyState,
                canary_class: str | None = None) -> tuple[SensorReading, int]:
    """The ready pods that answer and may carry a canary, and the smallest max_num_seqs they all report.

    Lent pods never carry one: a Job coming due drains them, and a canary whose pods leave mid-analysis
    measures nothing (they still serve the served draft, and its metrics count theirs). With serving
    groups, only the fastest group's pods (``canary_class``) do: a canary on a slower class would read as
    a throughput loss against the others and roll back a good draft."""
    if reading.observation is None:  # the pass holds its decisions: no pod need be asked
        return reading, fleet_max_batch_size((), state.table)
    statuses = fleet.statuses(ready_only=True)
    lent = {p.name for p in fleet.pods if p.lent or (canary_class is not None and p.gpu_class != canary_class)}
    answering = tuple(sorted(pod for pod, status in statuses.items() if status is not None and pod not in lent))
    cap = fleet_max_batch_size((s.max_num_seqs for s in statuses.values() if s is not None), state.table)
    return replace(reading, observation=replace(reading.observation, ready_pods=answering)), cap


def _sensor_reading(name: str, namespace: str, spec: TideDeploymentSpec, state: PolicyState, registry: DraftRegistry,
                    cluster: Cluster, config: OperatorConfig, adapters: PrometheusAdapters) -> SensorReading:
    """The pass's reading through this deployment's Prometheus connection (prometheus_access decides
    which URL and whose credentials; unusable credentials hold decisions like a Prometheus down)."""
    try:
        connection = resolve_connection(namespace, spec.prometheus, config, cluster.secret_data)
    except CredentialsError as e:
        return SensorReading(None, str(e))
    label = spec.prometheus.deployment_label or config.prometheus.deployment_label
    prometheus = adapters.for_connection(connection, label)
    return read_sensors(name, namespace, spec, state, prometheus, registry, cluster)


def forget(namespace: str, name: str) -> None:
    """A deleted TideDeployment's in-memory pass state (a new one of the same name starts afresh)."""
    _LAST_RUN.pop((namespace, name), None)
    _SAMPLE_CACHES.pop((namespace, name), None)
    _POOL_CACHES.pop((namespace, name), None)
    forget_served(namespace, name)


def make_registry(name: str, namespace: str, spec: TideDeploymentSpec, cluster: Cluster, *,
                  multipart_copy_threshold: int = DEFAULT_MULTIPART_COPY_THRESHOLD) -> DraftRegistry:
    s3 = spec.storage.s3
    credentials = cluster.secret_data(namespace, s3.credentials_secret) if s3.credentials_secret else {}
    client = S3_CLIENTS.client(s3.endpoint, s3.region or "us-east-1", credentials)  # reused while the keys are
    encryption = s3_encryption(spec.control.capture)  # the same settings the pods' writes carry
    return DraftRegistry(client, s3.bucket, registry_prefix(name, namespace, s3),
                         sse=encryption.algorithm, kms_key_id=encryption.kms_key_id,
                         sample_cache=_SAMPLE_CACHES.setdefault((namespace, name), CaptureSampleCache()),
                         pool_cache=_POOL_CACHES.setdefault((namespace, name), PoolCache()),
                         multipart_copy_threshold=multipart_copy_threshold)


def make_fleet(name: str, namespace: str, config: OperatorConfig, cluster: Cluster,
               tokens: tuple[str, ...]) -> Fleet:
    """The pods' control routes on their own port, with the current token (and the previous one, if kept)."""
    pods = [ServingPod(p["metadata"]["name"], (p.get("status") or {}).get("podIP", ""), _ready(p), _lent(p),
                       (p["metadata"].get("labels") or {}).get(labels.GPU_CLASS_LABEL))
            for p in cluster.pods(namespace, labels.serving_selector(name))
            if not p["metadata"].get("deletionTimestamp")]
    current, previous = (*tokens, "", "")[:2]
    return Fleet(pods, config.serving.control_port, current, previous, calls=config.pod_calls)


def _lent(pod: dict[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get(labels.SERVING_GROUP_LABEL) == labels.SERVING_GROUP_LENT


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


__all__ = ["SensorReading", "due", "forget", "run_control"]
