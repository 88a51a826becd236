"""The operator's own Prometheus metrics (prometheus_client), served on /metrics.

Series about one TideDeployment carry ``tide_namespace`` and ``tide_deployment``, not ``namespace``:
the ServiceMonitor's target labels already use ``namespace`` (the operator's), and a clash would
rename ours to ``exported_namespace``. The alert rules (charts/tide-operator/files/alerts/) and the
dashboards read these names; renaming one here means changing them there.

``python -m tide_operator`` calls ``start_metrics_server()`` before leader election (a follower's
``tide_operator_leader`` reads 0) and ``set_leader``. The handlers call the module-level functions (per pass
``with reconcile_timer():`` and ``observe_status(ns, name, status)``; ``record_decision`` per action,
``record_error`` per failed call, ``record_training_job`` when a trainer Job ends, ``forget`` on
delete); tests build their own ``OperatorMetrics`` on a fresh registry.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tide_operator.api.status import Phase

DEFAULT_PORT = 9100
PORT_ENV = "TIDE_METRICS_PORT"
ERROR_KINDS = ("prometheus", "s3", "kubernetes")
JOB_OUTCOMES = ("succeeded", "failed")
# A reconcile pass does Kubernetes I/O (tens of ms) and at worst waits on Prometheus and S3 timeouts.
RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_DEPLOYMENT = ("tide_namespace", "tide_deployment")


def package_version() -> str:
    try:
        return version("tide-operator")
    except PackageNotFoundError:
        return "unknown"


class OperatorMetrics:
    """Every series the operator exports, registered on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.info = Gauge("tide_operator_info", "Always 1; the operator's version (absent = operator down)",
                          ["version"], registry=r)
        self.info.labels(version=package_version()).set(1)
        self.reconcile_duration = Histogram("tide_operator_reconcile_duration_seconds",
                                            "Duration of one reconcile pass", buckets=RECONCILE_BUCKETS,
                                            registry=r)
        self.decisions = Counter("tide_operator_decisions_total", "Decisions carried out, by action and reason",
                                 [*_DEPLOYMENT, "action", "reason"], registry=r)
        self.phase = Gauge("tide_operator_phase", "1 for the phase a TideDeployment is in, 0 for the others",
                           [*_DEPLOYMENT, "phase"], registry=r)
        self.speculation_enabled = Gauge("tide_operator_speculation_enabled",
                                         "1 while the operator has speculation on", _DEPLOYMENT, registry=r)
        self.modelled_speedup = Gauge("tide_operator_modelled_speedup_ratio",
                                      "Modelled speedup of speculation at the observed batch size (1.35 = 35% faster)",
                                      _DEPLOYMENT, registry=r)
        self.errors = Counter("tide_operator_errors_total", "Failed calls to Prometheus, S3 or Kubernetes",
                              ["kind"], registry=r)
        self.training_jobs = Counter("tide_operator_training_jobs_total", "Finished trainer Jobs by outcome",
                                     [*_DEPLOYMENT, "outcome"], registry=r)
        self.serving_group_replicas = Gauge(
            "tide_operator_serving_group_replicas",
            "Replicas of one serving group (inference.servingGroups): its share of the total, and how many are ready",
            [*_DEPLOYMENT, "gpu_class", "state"], registry=r)
        self._groups: dict[tuple[str, str], set[str]] = {}  # the classes each deployment's series have
        self.leader = Gauge("tide_operator_leader",
                            "1 while this process holds the leader Lease and acts, 0 while it waits as a follower",
                            registry=r)
        for kind in ERROR_KINDS:  # present at 0 from the start, so increase() sees the first error
            self.errors.labels(kind=kind)

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def record_reconcile(self, duration_s: float) -> None:
        self.reconcile_duration.observe(duration_s)

    def record_decision(self, action: str, reason: str, namespace: str = "", name: str = "") -> None:
        self.decisions.labels(namespace, name, action, reason).inc()

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        """One series per known phase (a state set), so a dashboard can show when it changed."""
        if phase not in {p.value for p in Phase}:
            raise ValueError(f"phase: {phase!r} is not one of {[p.value for p in Phase]}")
        for known in Phase:
            self.phase.labels(namespace, name, known.value).set(1 if known.value == phase else 0)

    def set_speculation(self, namespace: str, name: str, enabled: bool, modelled_speedup: float | None) -> None:
        self.speculation_enabled.labels(namespace, name).set(1 if enabled else 0)
        if modelled_speedup is not None:
            self.modelled_speedup.labels(namespace, name).set(modelled_speedup)

    def record_error(self, kind: str) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"kind: {kind!r} is not one of {ERROR_KINDS}")
        self.errors.labels(kind=kind).inc()

    def record_training_job(self, namespace: str, name: str, outcome: str) -> None:
        if outcome not in JOB_OUTCOMES:
            raise ValueError(f"outcome: {outcome!r} is not one of {JOB_OUTCOMES}")
        self.training_jobs.labels(namespace, name, outcome).inc()

    def observe_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Phase and speculation gauges from a status as the operator writes it (camelCase)."""
        if status.get("phase"):
            self.set_phase(namespace, name, str(status["phase"]))
        speculation = status.get("speculation") or {}
        if speculation:
            percent = speculation.get("modelledSpeedupPercent")
            self.set_speculation(namespace, name, bool(speculation.get("enabled")),
                                 None if percent is None else percent / 100)
        self.set_serving_groups(namespace, name, status.get("servingGroups") or ())

    def set_serving_groups(self, namespace: str, name: str, groups: Any) -> None:
        """Desired and ready replicas per class; a class that left the groups (or retired) loses its series."""
        now = {str(g.get("gpuClass")): g for g in groups if isinstance(g, Mapping) and g.get("gpuClass")}
        for gone in self._groups.get((namespace, name), set()) - set(now):
            self._drop_group(namespace, name, gone)
        for gpu_class, group in now.items():
            self.serving_group_replicas.labels(namespace, name, gpu_class, "desired").set(group.get("replicas", 0))
            self.serving_group_replicas.labels(namespace, name, gpu_class, "ready").set(group.get("replicasReady", 0))
        self._groups[(namespace, name)] = set(now)

    def _drop_group(self, namespace: str, name: str, gpu_class: str) -> None:
        for state in ("desired", "ready"):
            with suppress(KeyError):
                self.serving_group_replicas.remove(namespace, name, gpu_class, state)

    @contextmanager
    def reconcile_timer(self) -> Iterator[None]:
        """Times a reconcile pass (also when it raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.record_reconcile(time.perf_counter() - started)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted TideDeployment's gauges (counters stay: rate() needs their history)."""
        for known in Phase:
            with suppress(KeyError):  # never set: nothing to drop
                self.phase.remove(namespace, name, known.value)
        for gauge in (self.speculation_enabled, self.modelled_speedup):
            with suppress(KeyError):
                gauge.remove(namespace, name)
        for gpu_class in self._groups.pop((namespace, name), set()):
            self._drop_group(namespace, name, gpu_class)


METRICS = OperatorMetrics()


def set_leader(leading: bool) -> None:
    METRICS.set_leader(leading)


def record_reconcile(duration_s: float) -> None:
    METRICS.record_reconcile(duration_s)


def record_decision(action: str, reason: str, namespace: str = "", name: str = "") -> None:
    METRICS.record_decision(action, reason, namespace, name)


def set_phase(namespace: str, name: str, phase: str) -> None:
    METRICS.set_phase(namespace, name, phase)


def set_speculation(namespace: str, name: str, enabled: bool, modelled_speedup: float | None) -> None:
    METRICS.set_speculation(namespace, name, enabled, modelled_speedup)


def record_error(kind: str) -> None:
    METRICS.record_error(kind)


def record_training_job(namespace: str, name: str, outcome: str) -> None:
    METRICS.record_training_job(namespace, name, outcome)


def observe_status(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    METRICS.observe_status(namespace, name, status)


def reconcile_timer() -> AbstractContextManager[None]:
    return METRICS.reconcile_timer()


def forget(namespace: str, name: str) -> None:
    METRICS.forget(namespace, name)


def start_metrics_server(port: int | None = None, addr: str = "0.0.0.0") -> int:
    """Serve /metrics on ``port`` (default: env TIDE_METRICS_PORT, else 9100); returns the port."""
    chosen = port if port is not None else int(os.environ.get(PORT_ENV, DEFAULT_PORT))
    start_http_server(chosen, addr=addr, registry=METRICS.registry)
    return chosen
