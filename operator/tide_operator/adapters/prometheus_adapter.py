"""Prometheus adapter: the control loop's live numbers, batched across TideDeployments.

    adapter = adapters.for_connection(connection, "label_tide_dev_deployment")   # or for_endpoint(url)
    metrics = adapter.deployment(DeploymentKey("team-a", "llama"))   # DeploymentMetrics | None
    obs = observation(metrics, served_version="v3")                  # the policy's Observation

One `PrometheusAdapter` per endpoint slot runs the few queries of `prometheus_adapter_queries` (one
per metric, all deployments at once, evaluated at the same instant) and answers every TideDeployment's
handler from that snapshot. After the first read a poller thread (`prometheus_poller`) refreshes it
every `interval_s` on a fixed schedule, so the query rate depends on neither the number of
deployments nor when their timers fire; passes read it from memory, and fetch it themselves only
when it is stale (first read, poller stopped or behind). A slot nobody reads stops its poller;
`PrometheusAdapters` closes the adapter it replaces. Unreachable or malformed answers raise
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

from tide_operator.adapters.prometheus_adapter_metrics import DeploymentMetrics, deployment_metrics
from tide_operator.adapters.prometheus_adapter_queries import (
    DeploymentKey,
    LabelNames,
    Metric,
    PrometheusResponseError,
    build_queries,
    group_results,
    parse_vector,
)
from tide_operator.adapters.prometheus_poller import SlotPoller, idle_limit, next_tick
from tide_operator.api.messages import redact, truncate
from tide_operator.control.prometheus_access import PrometheusConnection, split_userinfo

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
    # Queries evaluate this long before the snapshot's time: every query of it then reads the same ingested
    # scrapes (at now, one ingested between two queries skews the ratios of their answers).
    settle_s: float = 0.0
    poll_idle_s: float | None = None  # a poller nobody reads stops after this; None: idle_limit(interval_s)
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
    if _refused(err):
        return f"credentials refused: {text}"
    return f"query failed: {text}"


def _refused(err: Exception) -> bool:
    return re.match(r"HTTP Status Code 40[13]\b", str(err)) is not None


OnRefused = Callable[[Sequence[str]], Any]  # the credentials an answer refused (secret_cache.forget_holding)


def http_query(endpoint: str | PrometheusConnection, timeout_s: float, on_refused: OnRefused | None = None) -> QueryFn:
    """prometheus-api-client's instant query; connection and HTTP errors become PrometheusUnavailable.

    A 401 or 403 also goes to ``on_refused`` with the connection's secrets, so the Secret they came
    from is read again (a rotated token) before the next pass builds its connection."""
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
            if on_refused is not None and _refused(err):
                on_refused(secrets)
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
                 query: QueryFn | None = None, clock: Callable[[], float] = time.time,
                 poll: bool = True, on_refused: OnRefused | None = None) -> None:
        self.connection = connection_of(endpoint)
        self.endpoint = self.connection.url  # never with userinfo: it goes into messages
        self.config = config or AdapterConfig()
        self._query = query or http_query(self.connection, self.config.timeout_s, on_refused)
        self._clock = clock
        self._queries = build_queries(self.config.labels, self.config.window_s)
        self._poll = poll and self.config.interval_s > 0
        self._lock = threading.Lock()  # the state below; never held during a fetch
        self._fetching = threading.Lock()  # one fetch at a time, the poller's or a reader's
        self._last: Snapshot | PrometheusUnavailable | None = None
        self._last_at = float("-inf")
        self._read_at = float("-inf")
        self._poller: SlotPoller | None = None
        self._closed = False

    def snapshot(self) -> Snapshot:
        """The latest snapshot. While the poller runs it is read from memory; without a fresh one
        (first read, poller stopped or behind) it is fetched here. A failure is remembered like a
        snapshot, so N deployments do not hammer a dead endpoint N times."""
        with self._lock:
            self._read_at = self._clock()
            last = self._fresh(self._read_at)
        if last is None:
            with self._fetching:  # behind a poller's fetch: wait for it, then its answer is fresh
                with self._lock:
                    last = self._fresh(self._clock())
                if last is None:
                    last = self._store(self._clock())
        self._ensure_polling()
        if isinstance(last, PrometheusUnavailable):
            raise last
        return last

    def refresh(self) -> bool:
        """One poller tick: fetch unless no pass read the slot for `idle_limit`; False stops it."""
        with self._lock:
            if self._closed or self._clock() - self._read_at > self._idle_s:
                return False
        with self._fetching:
            self._store(self._clock())
        return True

    def close(self) -> None:
        """Stop polling for good (the slot got a new adapter); later reads fetch lazily."""
        with self._lock:
            self._closed = True
            poller, self._poller = self._poller, None
        if poller is not None:
            poller.stop()

    @property
    def polling(self) -> bool:
        return self._poller is not None and self._poller.running

    @property
    def _idle_s(self) -> float:
        return self.config.poll_idle_s if self.config.poll_idle_s is not None else idle_limit(self.config.interval_s)

    def _fresh(self, now: float) -> Snapshot | PrometheusUnavailable | None:
        """The last answer if young enough: an interval without a poller, two ticks and a fetch with one."""
        interval = self.config.interval_s
        max_age = 2 * interval + self.config.timeout_s if self.polling else interval
        return self._last if self._last is not None and now - self._last_at < max_age else None

    def _store(self, now: float) -> Snapshot | PrometheusUnavailable:
        """Fetch at ``now`` (caller holds `_fetching`) and keep the answer or the failure."""
        try:
            answer: Snapshot | PrometheusUnavailable = self._fetch(now - self.config.settle_s)
        except PrometheusUnavailable as err:
            answer = err
        with self._lock:
            self._last, self._last_at = answer, now
        return answer

    def _ensure_polling(self) -> None:
        if not self._poll:
            return
        with self._lock:
            if self._closed or self.polling:
                return
            first = next_tick(self._last_at, self.config.interval_s, self._clock())
            self._poller = SlotPoller(self.refresh, self.config.interval_s, first, clock=self._clock,
                                      name=f"prometheus-poller {self.endpoint}").start()

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
                 factory: Callable[[PrometheusConnection, AdapterConfig], PrometheusAdapter] | None = None,
                 on_refused: OnRefused | None = None) -> None:
        self.config = config or AdapterConfig()
        self._factory = factory or (lambda connection, config: PrometheusAdapter(connection, config,
                                                                                 on_refused=on_refused))
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
                if made is not None:
                    made[1].close()  # the rotated-out credentials' poller stops now, not when idle
                config = replace(self.config, labels=replace(self.config.labels, deployment=label))
                made = self._adapters[slot] = (connection, self._factory(connection, config))
            return made[1]
