"""The capture-retention timer's pass for one TideDeployment (handlers.py wires it to Kopf).

Independent of Prometheus and of the lifecycle phase: it needs only the spec, S3 and the trainer
Jobs. A spec the operator refuses (invalid, pod policy, storage tenancy) is never pruned: the
operator's identity never reaches S3 for it. S3 failing is logged and retried at the next tick.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.rest import ApiException

from tide_operator.adapters.cluster import Cluster
from tide_operator.api import SpecError, parse_spec
from tide_operator.config import OperatorConfig
from tide_operator.control.storage_tenancy import with_storage_defaults
from tide_operator.passes.capture_retention import enforce_retention
from tide_operator.passes.control_step import make_registry
from tide_operator.passes.effects import STORAGE_ERRORS
from tide_operator.passes.serving_status import EventNote
from tide_operator.reconcile import policy_refusal

log = logging.getLogger(__name__)


def retention_pass(body: dict[str, Any], cluster: Cluster, config: OperatorConfig,
                   now: datetime | None = None) -> list[EventNote]:
    """Prune one deployment's captures now; the Events to post (pruned shards, released claims)."""
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    try:
        spec = parse_spec(body.get("spec"), config.catalog.names())
    except SpecError:
        return []  # the reconcile pass reports it; nothing reaches S3
    if policy_refusal(spec, namespace, name, config):
        return []
    spec = with_storage_defaults(spec, config.storage)
    try:
        registry = make_registry(name, namespace, spec, cluster)
        return enforce_retention(name, namespace, spec, registry, cluster, config, now or datetime.now(UTC))
    except (*STORAGE_ERRORS, ApiException) as e:  # the buffer stays as it is until a later tick succeeds
        log.warning("capture retention of %s/%s: %s", namespace, name, e)
        return []
