"""Prometheus adapter: the control loop's live numbers, batched across TideDeployments.

    adapter = adapters.for_endpoint("http://prometheus:9090")
    metrics = adapter.deployment(DeploymentKey("team-a", "llama"))   # DeploymentMetrics | None
    obs = observation(metrics, served_version="v3")                  # the policy's Observation

One `PrometheusAdapter` per endpoint runs the few queries of `prometheus_adapter_queries` (one per
metric, all deployments at once, evaluated at the same instant) at most once per `interval_s` and
answers every TideDeployment's handler from that snapshot. Unreachable or malformed answers raise
`PrometheusUnavailable` (the handlers set a Degraded condition and hold their decisions); a
deployment without series is `None` and missing ratios are `None`: insufficient data, never 0.

The HTTP call goes through prometheus-api-client's `PrometheusConnect.custom_query` (requests
underneath); a test or another client can pass any `query(promql, at) -> list[dict]` callable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tide_operator.prometheus_adapter_metrics import DeploymentMetrics, deployment_metrics
from tide_operator.prometheus_adapter_queries import (
    DeploymentKey,
    LabelNames,
    Metric,
    PrometheusResponseError,
    build_queries,
    group_results,
    parse_vector,
)

QueryFn = Callable[[str, float], Sequence[Mapping[str, Any]]]


class PrometheusUnavailable(RuntimeError):
    """Prometheus did not answer, or answered something that is not an instant vector."""

    def __init__(self, endpoint: str, what: str) -> None:
        super().__init__(f"prometheus {endpoint}: {what}")
        self.endpoint = endpoint


@dataclass(frozen=True)
class AdapterConfig:
    window_s: float = 60.0  # rate window; keep it >= 4 scrape intervals
    interval_s: float = 10.0  # a snapshot answers every deployment for this long
    timeout_s: float = 5.0
    labels: LabelNames = field(default_factory=LabelNames)


@dataclass(frozen=True)
class Snapshot:
    at: float  # evaluation time (epoch seconds) of every query in it
    deployments: Mapping[DeploymentKey, DeploymentMetrics]


def http_query(endpoint: str, timeout_s: float) -> QueryFn:
    """prometheus-api-client's instant query; connection and HTTP errors become PrometheusUnavailable."""
    import requests
    from prometheus_api_client.exceptions import PrometheusApiClientException
    from prometheus_api_client.prometheus_connect import PrometheusConnect
    from urllib3.util.retry import Retry

    # One quick retry: a down Prometheus must turn into Degraded within the pass, not after backoffs.
    retry = Retry(total=1, backoff_factor=0.2, status_forcelist=[502, 503, 504])
    client = PrometheusConnect(url=endpoint, disable_ssl=True, retry=retry, timeout=max(1, round(timeout_s)))

    def query(promql: str, at: float) -> Sequence[Mapping[str, Any]]:
        try:
            result = client.custom_query(promql, params={"time": f"{at:.3f}"})
        except (requests.RequestException, PrometheusApiClientException) as err:
            raise PrometheusUnavailable(endpoint, f"query failed: {err}") from err
        except (ValueError, KeyError, TypeError) as err:  # not JSON, or no data.result
            raise PrometheusUnavailable(endpoint, f"malformed answer: {err!r}") from err
        if not isinstance(result, list):
            raise PrometheusUnavailable(endpoint, f"expected an instant vector, got {type(result).__name__}")
        return result

    return query


class PrometheusAdapter:
    """Snapshots of every TideDeployment behind one Prometheus endpoint (thread-safe)."""

    def __init__(self, endpoint: str, config: AdapterConfig | None = None, *,
                 query: QueryFn | None = None, clock: Callable[[], float] = time.time) -> None:
        self.endpoint = endpoint
        self.config = config or AdapterConfig()
        self._query = query or http_query(endpoint, self.config.timeout_s)
        self._clock = clock
        self._queries = build_queries(self.config.labels, self.config.window_s)
        self._lock = threading.Lock()
        self._last: Snapshot | PrometheusUnavailable | None = None
        self._last_at = float("-inf")

    def snapshot(self) -> Snapshot:
        """The current snapshot, refreshed when older than interval_s; a failure is remembered as
        long as a snapshot would be, so N deployments do not hammer a dead endpoint N times."""
        with self._lock:
            now = self._clock()
            if self._last is None or now - self._last_at >= self.config.interval_s:
                self._last_at = now
                try:
                    self._last = self._fetch(now)
                except PrometheusUnavailable as err:
                    self._last = err
            if isinstance(self._last, PrometheusUnavailable):
                raise self._last
            return self._last

    def deployment(self, key: DeploymentKey) -> DeploymentMetrics | None:
        return self.snapshot().deployments.get(key)

    def _fetch(self, at: float) -> Snapshot:
        labels = self.config.labels
        parsed = {}
        for metric, promql in self._queries.items():
            try:
                parsed[metric] = parse_vector(metric, self._query(promql, at), labels)
            except PrometheusResponseError as err:
                raise PrometheusUnavailable(self.endpoint, f"bad answer to {metric.value}: {err}") from err
        return Snapshot(at=at, deployments=deployment_metrics(group_results(parsed)))

    @property
    def queries(self) -> Mapping[Metric, str]:
        return dict(self._queries)


class PrometheusAdapters:
    """One adapter per endpoint, so deployments sharing a Prometheus share its queries."""

    def __init__(self, config: AdapterConfig | None = None,
                 factory: Callable[[str, AdapterConfig], PrometheusAdapter] | None = None) -> None:
        self.config = config or AdapterConfig()
        self._factory = factory or PrometheusAdapter
        self._adapters: dict[str, PrometheusAdapter] = {}
        self._lock = threading.Lock()

    def for_endpoint(self, endpoint: str) -> PrometheusAdapter:
        key = endpoint.rstrip("/")
        with self._lock:
            if key not in self._adapters:
                self._adapters[key] = self._factory(key, self.config)
            return self._adapters[key]
