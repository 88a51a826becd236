"""What `tide plot` draws: time series from Prometheus' HTTP API (query_range) and markers from Events.

Label names follow the operator's queries and the chart's PodMonitor: vLLM series carry
``namespace`` and ``label_tide_dev_deployment``; the serving plugin's ``tide_draft_info{version}``
names the draft each pod serves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tide_operator.cli.kube import EventNote

DEPLOYMENT_LABEL = "label_tide_dev_deployment"
PROMOTION, ROLLBACK = "promotion", "rollback"


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]  # (unix seconds, value)


@dataclass(frozen=True)
class Marker:
    time: float  # unix seconds
    kind: str  # PROMOTION or ROLLBACK
    text: str


@dataclass(frozen=True)
class Timeline:
    title: str
    start: float
    end: float
    acceptance_length: tuple[Series, ...]
    speculation: tuple[Series, ...]
    batch_size: tuple[Series, ...]
    markers: tuple[Marker, ...]


@dataclass(frozen=True)
class Queries:
    """PromQL for one TideDeployment; ``window`` is the rate() range (a PromQL duration)."""

    namespace: str
    name: str
    window: str
    label: str = DEPLOYMENT_LABEL

    @property
    def selector(self) -> str:
        return f'{{namespace="{self.namespace}", {self.label}="{self.name}"}}'

    def _rate(self, metric: str, by: str = "", join: bool = False) -> str:
        inner = f"rate({metric}{self.selector}[{self.window}])"
        if join:
            inner = f"({inner} * on (namespace, pod) group_left (version) tide_draft_info{self.selector})"
        return f"sum {f'by ({by}) ' if by else ''}({inner})"

    def acceptance_length(self, per_version: bool) -> str:
        by = "version" if per_version else ""
        accepted = self._rate("vllm:spec_decode_num_accepted_tokens_total", by, per_version)
        drafts = self._rate("vllm:spec_decode_num_drafts_total", by, per_version)
        return f"1 + {accepted} / {drafts}"

    def speculation(self) -> str:
        return f"max(tide_speculation_enabled{self.selector})"

    def batch_size(self) -> str:
        running = f"vllm:num_requests_running{self.selector}"
        return f"sum({running}) / count({running})"


QueryRange = Callable[[str], list[Series]]


def prometheus_query_range(url: str, start: float, end: float, step: float, timeout_s: float = 30) -> QueryRange:
    """A function running one PromQL range query against Prometheus at ``url`` (prometheus-api-client,
    the operator's own client: one HTTP stack for both)."""
    import requests
    from prometheus_api_client import PrometheusConnect
    from prometheus_api_client.exceptions import PrometheusApiClientException
    from urllib3.util.retry import Retry

    retry = Retry(total=1, backoff_factor=0.2, status_forcelist=[502, 503, 504])  # a down one fails fast
    client = PrometheusConnect(url=url.rstrip("/"), disable_ssl=False, retry=retry, timeout=max(1, round(timeout_s)))

    def run(expr: str) -> list[Series]:
        try:
            result = client.custom_query_range(expr, start_time=datetime.fromtimestamp(start, UTC),
                                               end_time=datetime.fromtimestamp(end, UTC), step=f"{step:g}")
        except requests.RequestException as err:  # refused, DNS, TLS, timeouts
            raise RuntimeError(f"Prometheus at {url} did not answer {expr!r}: {err}") from err
        except PrometheusApiClientException as err:  # a 400 for bad PromQL and other refusals
            raise RuntimeError(f"Prometheus refused {expr!r}: {err}") from err
        return parse_matrix({"result": result})

    return run


def parse_matrix(data: dict[str, Any]) -> list[Series]:
    """Series of a query_range answer; NaN and infinite samples (no traffic) are dropped."""
    series = []
    for result in data.get("result", []):
        points = tuple((float(t), float(v)) for t, v in result["values"] if math.isfinite(float(v)))
        series.append(Series(result["metric"].get("version", ""), points))
    return [s for s in series if s.points]


def _named(series: list[Series], fallback: str) -> tuple[Series, ...]:
    return tuple(Series(s.label or fallback, s.points) for s in series)


def markers_from_events(events: Sequence[EventNote]) -> tuple[Marker, ...]:
    """Promotions and rollbacks among the operator's Events (message ``<Action>: ...``)."""
    markers = []
    for event in events:
        action = event.message.split(":", 1)[0]
        kind = PROMOTION if action == "Promote" else ROLLBACK if action == "RollBack" else None
        if kind and event.time:
            moment = datetime.fromisoformat(event.time.replace("Z", "+00:00")).timestamp()
            markers.append(Marker(moment, kind, event.message.split(":", 1)[1].strip() or event.reason))
    return tuple(markers)


def build_timeline(queries: Queries, query_range: QueryRange, events: Sequence[EventNote],
                   start: float, end: float) -> Timeline:
    """The axis starts at the first data point or marker, not at ``start`` when the data starts later
    (a deployment younger than --since drew a plot two-thirds empty)."""
    acceptance = query_range(queries.acceptance_length(per_version=True))
    if not acceptance:  # pods without the plugin's draft info: one line for the whole deployment
        acceptance = query_range(queries.acceptance_length(per_version=False))
    speculation = _named(query_range(queries.speculation()), "speculation")
    batch_size = _named(query_range(queries.batch_size()), "running requests per engine")
    markers = tuple(m for m in markers_from_events(events) if start <= m.time <= end)
    lengths = tuple(Series(f"draft {s.label}" if s.label else "all pods", s.points) for s in acceptance)
    seen = [s.points[0][0] for s in (*lengths, *speculation, *batch_size)] + [m.time for m in markers]
    return Timeline(
        title=f"TideDeployment {queries.namespace}/{queries.name}",
        start=max(start, min(seen)) if seen else start, end=end,
        acceptance_length=lengths, speculation=speculation, batch_size=batch_size, markers=markers,
    )
