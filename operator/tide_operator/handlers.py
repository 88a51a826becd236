"""Kopf wiring: thin handlers that run one reconcile pass and write its status once.

Every TideDeployment is reconciled on create, on spec change, on operator start, and on a timer
(level-triggered drift repair). A pass that changes nothing writes nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import kopf
import yaml
from kubernetes.client.rest import ApiException

from tide_operator import metrics
from tide_operator.adapters import watch_cache
from tide_operator.adapters.artifacts import ArtifactsRefused, ArtifactsUnreachable, delete_deployment_artifacts
from tide_operator.adapters.cluster import Cluster, api_client, set_request_timeout
from tide_operator.adapters.gpu_request_watch import GpuRequestWatch
from tide_operator.adapters.prometheus_adapter import AdapterConfig, PrometheusAdapters
from tide_operator.adapters.secret_cache import SECRETS
from tide_operator.api import GROUP, PLURAL, VERSION
from tide_operator.api.messages import bounded_message
from tide_operator.config import OperatorConfig, load_operator_config
from tide_operator.control.manual import ABORT_ANNOTATION, PROMOTE_ANNOTATION, ROLLBACK_ANNOTATION, unconsumed
from tide_operator.manifests import names
from tide_operator.manifests.control_token import ROTATE_ANNOTATION
from tide_operator.manifests.labels import DEPLOYMENT_LABEL
from tide_operator.passes import control_step
from tide_operator.passes.capture_retention import stop_capture_writers
from tide_operator.passes.retention_timer import retention_pass
from tide_operator.reconcile import reconcile

log = logging.getLogger(__name__)
KOPF_STATUS_KEYS = ("kopf",)
DELETE_RETRY_DELAY_S = 3  # between attempts at deleting a TideDeployment's S3 data
WRITER_STOP_ATTEMPTS = 20  # waits (DELETE_RETRY_DELAY_S each) for the serving pods to stop before deleting captures


def load_config() -> OperatorConfig:
    """From the YAML file named by TIDE_OPERATOR_CONFIG (the chart's ConfigMap), else defaults."""
    path = os.environ.get("TIDE_OPERATOR_CONFIG")
    return load_operator_config(yaml.safe_load(Path(path).read_text()) if path else {})


CONFIG = load_config()
set_request_timeout(CONFIG.kubernetes)  # every Cluster() below: its API calls time out
# Whether every namespace is watched (__main__ sets it): only then do the watched pods show every GPU
# in use; a namespaced operator lists pods for placement (watch_cache.py).
CLUSTERWIDE = True
# The GPUs scheduled pods of every namespace hold, for placement (started by a cluster-wide operator).
GPU_REQUESTS = GpuRequestWatch(api_client)
# One adapter per endpoint: deployments sharing a Prometheus share its queries.
# A 401/403 from Prometheus drops the Secret its credentials came from: the next pass reads it again.
PROMETHEUS = PrometheusAdapters(AdapterConfig(window_s=CONFIG.prometheus_window_seconds,
                                              interval_s=CONFIG.prometheus_interval_seconds,
                                              settle_s=CONFIG.prometheus_settle_seconds),
                                on_refused=SECRETS.forget_holding)
SECRETS.max_age_s = CONFIG.kubernetes.secret_max_age_seconds


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Our own prefix from day one: changing storage later would re-handle every object.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.loggers = False  # Events are ours, one per decision, not one per log line
    settings.execution.max_workers = 4
    settings.watching.server_timeout = 300
    # Only our own pods, Jobs and Deployments reach Kopf's watches (the apiserver filters): the cluster's other pods
    # are watched apart, and only those bound to a node (gpu_request_watch.py).
    for resource in (("", "v1", "pods"), ("batch", "v1", "jobs"), ("apps", "v1", "deployments")):
        settings.watching.label_selectors[resource] = DEPLOYMENT_LABEL


@kopf.on.cleanup()
def stop_watches(**_: Any) -> None:
    GPU_REQUESTS.stop()


# Watch caches (watch_cache.py): our own pods, Jobs and Deployments, and every node; the GPUs pods hold per node.
kopf.index("", "v1", "pods", labels={DEPLOYMENT_LABEL: kopf.PRESENT}, id="tide_pods")(watch_cache.tide_object)
kopf.index("batch", "v1", "jobs", labels={DEPLOYMENT_LABEL: kopf.PRESENT}, id="tide_jobs")(watch_cache.tide_object)
kopf.index("apps", "v1", "deployments", labels={DEPLOYMENT_LABEL: kopf.PRESENT},
           id="tide_deployments")(watch_cache.tide_object)
kopf.index("", "v1", "nodes", id="gpu_nodes")(watch_cache.gpu_node)


def cluster(kwargs: dict[str, Any]) -> Cluster:
    """The Kubernetes adapter for one handler call, reading pods, Jobs and nodes from the watch caches."""
    if CLUSTERWIDE:
        GPU_REQUESTS.start()  # at the first pass: Kopf has logged in (the first placement lists pods itself)
    return Cluster(cache=watch_cache.WatchCache.from_kwargs(kwargs, GPU_REQUESTS if CLUSTERWIDE else None),
                   secrets=SECRETS)


def adopt(body: kopf.Body) -> Any:
    def own(child: dict[str, Any]) -> dict[str, Any]:
        # Owner reference only: copying the CR's labels would copy Argo CD's tracking label.
        kopf.append_owner_reference(child, owner=body)
        return child

    return own


@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile-on-resume")
@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile-on-create")
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", id="reconcile-on-spec-change")
@kopf.on.update(GROUP, VERSION, PLURAL, field=("metadata", "annotations", ROTATE_ANNOTATION),
                id="reconcile-on-token-rotation")
# tide abort|promote|rollback: a pass at once; it consumes the request and the annotation goes.
@kopf.on.update(GROUP, VERSION, PLURAL, field=("metadata", "annotations", ABORT_ANNOTATION), new=kopf.PRESENT,
                id="reconcile-on-abort-request")
@kopf.on.update(GROUP, VERSION, PLURAL, field=("metadata", "annotations", PROMOTE_ANNOTATION), new=kopf.PRESENT,
                id="reconcile-on-promote-request")
@kopf.on.update(GROUP, VERSION, PLURAL, field=("metadata", "annotations", ROLLBACK_ANNOTATION), new=kopf.PRESENT,
                id="reconcile-on-rollback-request")
# backoff: a pass that raised (the apiserver away for a moment) is retried at the resync cadence, not after
# Kopf's default 60 s, which let an outage of seconds cost a canary its measurements.
@kopf.timer(GROUP, VERSION, PLURAL, interval=CONFIG.resync_interval_seconds, backoff=CONFIG.resync_interval_seconds,
            id="reconcile-resync")
def reconcile_tide_deployment(body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    namespace, name = body.metadata.namespace or "", body.metadata.name or ""
    with metrics.reconcile_timer():
        result = reconcile(_without_consumed(body, namespace, name), cluster(kwargs), CONFIG, adopt(body),
                           PROMETHEUS)
    write_status(patch, body.get("status") or {}, result.status)
    for key in result.consumed:  # merge patch: null removes the annotation
        patch.metadata.annotations[key] = None
    if result.consumed:
        annotations = body.metadata.annotations or {}
        _CONSUMED[(namespace, name)] = (str(body.metadata.get("resourceVersion") or ""),
                                        {key: annotations.get(key, "") for key in result.consumed})
    metrics.observe_status(namespace, name, result.status)
    for note in result.events:
        post_event(body, note.type, note.reason, note.message)
        if note.action:
            metrics.record_decision(note.action, note.reason, namespace, name)
        if note.training_outcome:
            metrics.record_training_job(namespace, name, note.training_outcome)
    for applied in result.applied:
        if applied.action != "unchanged":
            log.info("%s %s %s %s", applied.action, applied.kind, applied.name, ", ".join(applied.drift))


# Requests (control/manual.py) a pass acted on, by the resourceVersion of the body it read: another
# handler of the same event, or a timer, reads that body before the annotation's removal lands and must
# not act on them again. Any newer version (the removal, a new request) is read as it is.
_CONSUMED: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}


def _without_consumed(body: kopf.Body, namespace: str, name: str) -> dict[str, Any]:
    plain = dict(body)
    version, consumed = _CONSUMED.get((namespace, name), ("", {}))
    if consumed and version == body.metadata.get("resourceVersion"):
        meta = dict(plain.get("metadata") or {})
        meta["annotations"] = unconsumed(meta.get("annotations") or {}, consumed)
        plain["metadata"] = meta
    return plain


def post_event(body: kopf.Body, type_: str, reason: str, message: str) -> None:
    """Every Event the operator posts: credentials stripped, length bounded (api/messages.py)."""
    kopf.event(body, type=type_, reason=reason, message=bounded_message(message))


def write_status(patch: kopf.Patch, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Patch only the top-level status fields that changed (nothing when nothing did)."""
    for key, value in new.items():
        if old.get(key) != value:
            patch.status[key] = value
    for key in old:
        if key not in new and key not in KOPF_STATUS_KEYS:
            patch.status[key] = None


def _s3_spec(spec: kopf.Spec) -> dict[str, Any]:
    return dict((spec.get("storage") or {}).get("s3") or {})


def _deletes_s3_data(spec: kopf.Spec, **_: Any) -> bool:
    s3 = _s3_spec(spec)
    return bool(s3.get("deleteArtifactsOnDelete")) or s3.get("deleteCapturesOnDelete", True) is not False


# Objects that delete S3 data on deletion (captures by default: tenant data) get this handler and so
# the finalizer; it gives up after config.deleteAttempts failures, so a namespace never hangs on S3.
@kopf.on.delete(GROUP, VERSION, PLURAL, id="delete-artifacts", when=_deletes_s3_data)
def delete_artifacts(body: kopf.Body, spec: kopf.Spec, retry: int, **kwargs: Any) -> None:
    everything = bool(_s3_spec(spec).get("deleteArtifactsOnDelete"))
    if retry < WRITER_STOP_ATTEMPTS and _capture_writers_running(body, cluster(kwargs)):
        raise kopf.TemporaryError("waiting for the serving pods to stop writing captures", delay=DELETE_RETRY_DELAY_S)
    try:
        if everything:
            deleted = delete_deployment_artifacts(dict(body), Cluster(), CONFIG)
        else:  # captures and the trainers' claims on them; drafts, pointer and history stay
            deleted = sum(delete_deployment_artifacts(dict(body), Cluster(), CONFIG, under=folder)
                          for folder in ("captures", "claims"))
    except ArtifactsUnreachable as e:
        # A refused spec (storage tenancy) stays refused: give up at once, nothing was deleted.
        if not isinstance(e, ArtifactsRefused) and retry + 1 < WRITER_STOP_ATTEMPTS + CONFIG.delete_attempts:
            raise kopf.TemporaryError(bounded_message(str(e)), delay=DELETE_RETRY_DELAY_S) from e
        # Give up: say what is left behind, and let the deletion finish (the finalizer goes).
        message = f"{e}; gave up after {retry + 1} attempts"
        post_event(body, "Warning", "ArtifactsKept", message)
        raise kopf.PermanentError(bounded_message(message)) from e
    what = "S3 objects" if everything else "capture objects (drafts kept)"
    post_event(body, "Normal", "ArtifactsDeleted", f"deleted {deleted} {what}")


def _capture_writers_running(body: kopf.Body, pods_from: Cluster) -> bool:
    """Scale the serving pods to zero first: shards they flush on the way out would outlive the delete."""
    meta = body.metadata
    try:
        return stop_capture_writers(meta.name or "", meta.namespace or "", meta.uid or "", pods_from,
                                    _group_deployments(body))
    except ApiException as e:  # cannot tell: delete now rather than hold the namespace
        log.warning("stopping the serving pods of %s/%s before deleting captures: %s", meta.namespace, meta.name, e)
        return False


def _group_deployments(body: kopf.Body) -> tuple[str, ...]:
    """The serving groups' Deployments, as status last listed them and as the spec names them."""
    listed = [g.get("deployment") for g in (body.get("status") or {}).get("servingGroups") or ()
              if isinstance(g, dict)]
    wanted = [names.group_serving_name(body.metadata.name or "", g.get("gpuClass", ""))
              for g in ((body.get("spec") or {}).get("inference") or {}).get("servingGroups") or ()
              if isinstance(g, dict) and isinstance(g.get("gpuClass"), str)]
    return tuple(dict.fromkeys(d for d in [*listed, *wanted] if isinstance(d, str) and d))


@kopf.timer(GROUP, VERSION, PLURAL, interval=CONFIG.capture_prune_interval_seconds, id="prune-captures")
def prune_captures(body: kopf.Body, **kwargs: Any) -> None:
    """Capture retention on its own cadence: whatever Prometheus and the lifecycle are doing."""
    for note in retention_pass(dict(body), cluster(kwargs), CONFIG):
        post_event(body, note.type, note.reason, note.message)
        if note.action:
            metrics.record_decision(note.action, note.reason, body.metadata.namespace or "", body.metadata.name or "")


@kopf.on.delete(GROUP, VERSION, PLURAL, id="forget-metrics", optional=True)
def forget_metrics(body: kopf.Body, **_: Any) -> None:
    namespace, name = body.metadata.namespace or "", body.metadata.name or ""
    metrics.forget(namespace, name)
    control_step.forget(namespace, name)
    _CONSUMED.pop((namespace, name), None)
