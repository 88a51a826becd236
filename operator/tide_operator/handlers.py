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

from tide_operator.api import GROUP, PLURAL, VERSION
from tide_operator.cluster import Cluster
from tide_operator.config import OperatorConfig, load_operator_config
from tide_operator.reconcile import reconcile

log = logging.getLogger(__name__)
KOPF_STATUS_KEYS = ("kopf",)


def load_config() -> OperatorConfig:
    """From the YAML file named by TIDE_OPERATOR_CONFIG (the chart's ConfigMap), else defaults."""
    path = os.environ.get("TIDE_OPERATOR_CONFIG")
    return load_operator_config(yaml.safe_load(Path(path).read_text()) if path else {})


CONFIG = load_config()


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


def adopt(body: kopf.Body) -> Any:
    def own(child: dict[str, Any]) -> dict[str, Any]:
        # Owner reference only: copying the CR's labels would copy Argo CD's tracking label.
        kopf.append_owner_reference(child, owner=body)
        return child

    return own


@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile-on-resume")
@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile-on-create")
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", id="reconcile-on-spec-change")
@kopf.timer(GROUP, VERSION, PLURAL, interval=CONFIG.resync_interval_seconds, id="reconcile-resync")
def reconcile_tide_deployment(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    result = reconcile(dict(body), Cluster(), CONFIG, adopt(body))
    write_status(patch, body.get("status") or {}, result.status)
    for note in result.events:
        kopf.event(body, type=note.type, reason=note.reason, message=note.message)
    for applied in result.applied:
        if applied.action != "unchanged":
            log.info("%s %s %s %s", applied.action, applied.kind, applied.name, ", ".join(applied.drift))


def write_status(patch: kopf.Patch, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Patch only the top-level status fields that changed (nothing when nothing did)."""
    for key, value in new.items():
        if old.get(key) != value:
            patch.status[key] = value
    for key in old:
        if key not in new and key not in KOPF_STATUS_KEYS:
            patch.status[key] = None
