"""Prometheus adapter: the control loop's live numbers, batched across TideDeployments.

    adapter = adapters.for_connection(connection, "label_tide_dev_deployment")   # or for_endpoint(url)
    metrics = adapter.deployment(DeploymentKey("team-a", "llama"))   # DeploymentMetrics | None
    obs = observation(metrics, served_version="v3")                  # the policy's Observation

One `PrometheusAdapter` per endpoint runs the few queries of `prometheus_adapter_queries` (one per
metric, all deployments at once, evaluated at the same instant) at most once per `interval_s` and
answers every TideDeployment's handler from that snapshot. Unreachable or malformed answers raise
`PrometheusUnavailable` (the handlers set a Degraded condition and hold their decisions); a
deployment without series is `None` and missing ratios are `None`: insufficient data, never 0.

The HTTP call goes through prometheus-api-client's `PrometheusConnect.custom_query` (requests
underneath) with the connection's CA and auth (`prometheus_access`: TLS is verified unless the
operator configuration says otherwise, redirects are not followed); a test or another client can
pass any `query(promql, at) -> list[dict]` callable. Error messages never carry the credentials.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tide_operator.api.messages import redact, truncate
from tide_operator.prometheus_access import PrometheusConnection, split_userinfo
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

    def __init__(self, endpoint: str, what: str, secrets: Sequence[str] = ()) -> None:
        # Bounded here too: the message reaches logs as well as conditions (api/messages.py).
        super().__init__(truncate(redact(f"prometheus {endpoint}: {what}", secrets), 768))
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


def connection_of(endpoint: str | PrometheusConnection) -> PrometheusConnection:
    """A bare URL is the legacy form: its userinfo becomes basic auth and leaves the URL."""
    if isinstance(endpoint, PrometheusConnection):
        return endpoint
    url, auth = split_userinfo(endpoint)
    return PrometheusConnection(url, auth)


def ca_bundle_path(pem: str) -> str:
    """A file holding ``pem`` (requests verifies against files); named by its hash, so written once."""
    directory = Path(tempfile.gettempdir()) / "tide-prometheus-ca"
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / (hashlib.sha256(pem.encode()).hexdigest()[:32] + ".pem")
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(pem)
        partial.replace(path)  # atomic: a concurrent reader never sees half a bundle
    return str(path)


def _verify(connection: PrometheusConnection) -> bool | str:
    if not connection.verify_tls:
        return False
    if connection.ca_pem:
        return ca_bundle_path(connection.ca_pem)
    return connection.ca_file or True


def _described(err: Exception) -> str:
    """What failed, with the setting to look at; requests' messages repeat the whole query string
    (PromQL, URL-encoded), so only its path is kept."""
    text = re.sub(r"with url: \S+", "with url: /api/v1/query", str(err))
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return f"TLS certificate not trusted (prometheus.caFile, or ca.crt in the credentials Secret): {text}"
    if re.match(r"HTTP Status Code 40[13]\b", text):
        return f"credentials refused: {text}"
    return f"query failed: {text}"


def http_query(endpoint: str | PrometheusConnection, timeout_s: float) -> QueryFn:
    """prometheus-api-client's instant query; connection and HTTP errors become PrometheusUnavailable."""
    import requests
    from prometheus_api_client.exceptions import PrometheusApiClientException
    from prometheus_api_client.prometheus_connect import PrometheusConnect
    from urllib3.util.retry import Retry

    connection = connection_of(endpoint)
    url, secrets = connection.url, connection.auth.secrets()
    session = requests.Session()
    session.verify = _verify(connection)
    session.max_redirects = 0  # a redirect would take the query (and the credentials) to an unchecked URL
    # One quick retry: a down Prometheus must turn into Degraded within the pass, not after backoffs.
    retry = Retry(total=1, backoff_factor=0.2, status_forcelist=[502, 503, 504])
    client = PrometheusConnect(url=url, headers=connection.auth.headers(), session=session, retry=retry,
                               timeout=max(1, round(timeout_s)))

    def query(promql: str, at: float) -> Sequence[Mapping[str, Any]]:
        try:
            result = client.custom_query(promql, params={"time": f"{at:.3f}"})
        except (requests.RequestException, PrometheusApiClientException) as err:
            raise PrometheusUnavailable(url, _described(err), secrets) from err
        except (ValueError, KeyError, TypeError) as err:  # not JSON, or no data.result
            raise PrometheusUnavailable(url, f"malformed answer: {err!r}", secrets) from err
        if not isinstance(result, list):
            raise PrometheusUnavailable(url, f"expected an instant vector, got {type(result).__name__}")
        return result

    return query


class PrometheusAdapter:
    """Snapshots of every TideDeployment behind one Prometheus endpoint (thread-safe)."""

    def __init__(self, endpoint: str | PrometheusConnection, config: AdapterConfig | None = None, *,
                 query: QueryFn | None = None, clock: Callable[[], float] = time.time) -> None:
        self.connection = connection_of(endpoint)
        self.endpoint = self.connection.url  # never with userinfo: it goes into messages
        self.config = config or AdapterConfig()
        self._query = query or http_query(self.connection, self.config.timeout_s)
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
    """One adapter per endpoint, credentials owner and deployment label, so deployments sharing a
    Prometheus share its queries, and never a snapshot fetched with another tenant's credentials."""

    def __init__(self, config: AdapterConfig | None = None,
                 factory: Callable[[PrometheusConnection, AdapterConfig], PrometheusAdapter] | None = None) -> None:
        self.config = config or AdapterConfig()
        self._factory = factory or PrometheusAdapter
        self._adapters: dict[tuple[str, str, str], tuple[PrometheusConnection, PrometheusAdapter]] = {}
        self._lock = threading.Lock()

    def for_endpoint(self, endpoint: str) -> PrometheusAdapter:
        return self.for_connection(connection_of(endpoint))

    def for_connection(self, connection: PrometheusConnection,
                       deployment_label: str | None = None) -> PrometheusAdapter:
        """The adapter of this slot; a slot whose credentials or CA changed (rotation) gets a new one."""
        connection = replace(connection, url=connection.url.rstrip("/"))
        label = deployment_label or self.config.labels.deployment
        slot = (connection.url, connection.credentials_owner, label)
        with self._lock:
            made = self._adapters.get(slot)
            if made is None or made[0] != connection:
                config = replace(self.config, labels=replace(self.config.labels, deployment=label))
                made = self._adapters[slot] = (connection, self._factory(connection, config))
            return made[1]
