"""PromQL for the control loop, and the parsing of its answers (pure: no network, no clock).

One query per metric, grouped by (namespace, deployment, draft version): every TideDeployment that
shares a Prometheus endpoint is answered by the same few queries. The queries return raw sums
(increases and rates), never ratios, so the per-version groups add up to the per-deployment totals
in Python and a group without traffic comes out as "no data" (None), never as 0 or NaN.

The draft version is not a vLLM label: the serving plugin exports `tide_draft_info{version=...}`
(one series per pod, docs/contracts/serving-control.md) and every metric is joined to it with
`* on(namespace, pod) group_left(version)`. Pods without that series (served without a draft, or
an inert plugin) are kept through `or on(namespace, pod)` and land in the version None group.
The join is evaluated at query time: for one rate window after a hot swap, a pod's increases
(partly earned by the old draft) count for the new version. Canary measurements should start one
window after the swap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tide_contracts.serving_control import METRIC_DRAFT_INFO


@dataclass(frozen=True)
class LabelNames:
    """Label names on the scraped series. Defaults match the local plane's file_sd targets; with a
    PodMonitor relabelling `tide.dev/deployment` to e.g. `tide_deployment`, set `deployment` so."""

    namespace: str = "namespace"
    pod: str = "pod"
    deployment: str = "label_tide_dev_deployment"
    version: str = "version"  # on the draft info metric (serving-control contract)
    position: str = "position"  # vLLM's per-position acceptance counter


class Metric(StrEnum):
    """What one query measures; the value is its key in a snapshot."""

    DRAFTS = "drafts"  # verify steps that carried drafts
    DRAFT_TOKENS = "draft_tokens"
    ACCEPTED_TOKENS = "accepted_tokens"  # the bonus token is not counted
    ACCEPTED_PER_POSITION = "accepted_per_position"
    GENERATION_RATE = "generation_rate"  # tokens/s
    REQUESTS_RUNNING = "requests_running"
    ENGINES = "engines"  # series of vllm:num_requests_running: one per engine


# metric -> (vLLM series, how it is reduced over the window)
_SOURCES: dict[Metric, tuple[str, str]] = {
    Metric.DRAFTS: ("vllm:spec_decode_num_drafts_total", "increase"),
    Metric.DRAFT_TOKENS: ("vllm:spec_decode_num_draft_tokens_total", "increase"),
    Metric.ACCEPTED_TOKENS: ("vllm:spec_decode_num_accepted_tokens_total", "increase"),
    Metric.ACCEPTED_PER_POSITION: ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "increase"),
    Metric.GENERATION_RATE: ("vllm:generation_tokens_total", "rate"),
    Metric.REQUESTS_RUNNING: ("vllm:num_requests_running", "sum"),
    Metric.ENGINES: ("vllm:num_requests_running", "count"),
}


def duration(seconds: float) -> str:
    """A PromQL range duration (whole seconds: PromQL 2.x has no fractional durations)."""
    if seconds < 1:
        raise ValueError(f"rate window must be at least 1s, got {seconds}")
    return f"{round(seconds)}s"


def _series(metric: Metric, labels: LabelNames, window_s: float) -> str:
    """Per-pod (per-engine) series of one metric, restricted to TideDeployment pods."""
    name, reduce = _SOURCES[metric]
    selector = f'{name}{{{labels.deployment}!=""}}'
    if reduce in ("increase", "rate"):
        return f"{reduce}({selector}[{duration(window_s)}])"
    if reduce == "count":
        return f"({selector} * 0 + 1)"  # 1 per engine, so the grouped sum counts engines
    return selector


def with_draft_version(expr: str, labels: LabelNames) -> str:
    """`expr` with the served draft's version attached; pods without a draft keep no version label."""
    on = f"on({labels.namespace}, {labels.pod})"
    # One info series per pod: should a pod ever show two versions (a target scraped twice, a
    # swap inside one lookback), topk picks one instead of failing every deployment's query with
    # a many-to-many matching error.
    one = f"topk by ({labels.namespace}, {labels.pod}) (1, {METRIC_DRAFT_INFO})"
    info = f"max by ({labels.namespace}, {labels.pod}, {labels.version}) ({one})"
    return f"({expr} * {on} group_left({labels.version}) {info}) or {on} {expr}"


def grouping(metric: Metric, labels: LabelNames) -> tuple[str, ...]:
    group = (labels.namespace, labels.deployment, labels.version)
    return (*group, labels.position) if metric is Metric.ACCEPTED_PER_POSITION else group


def build_query(metric: Metric, labels: LabelNames, window_s: float) -> str:
    """The one query for `metric` across every TideDeployment behind this Prometheus."""
    inner = with_draft_version(_series(metric, labels, window_s), labels)
    return f"sum by ({', '.join(grouping(metric, labels))}) ({inner})"


def build_queries(labels: LabelNames, window_s: float) -> dict[Metric, str]:
    return {metric: build_query(metric, labels, window_s) for metric in Metric}


# ---------------------------------------------------------------- parsing


@dataclass(frozen=True, order=True)
class DeploymentKey:
    namespace: str
    name: str


GroupKey = tuple[DeploymentKey, str | None]  # (deployment, draft version; None: no draft info)


class PrometheusResponseError(ValueError):
    """An answer that is not an instant vector of the expected shape; the message says what."""


def sample_value(sample: Mapping[str, Any]) -> float | None:
    """The float of one instant-vector sample; NaN and infinities are no data (None)."""
    try:
        _, raw = sample["value"]
        value = float(raw)
    except (KeyError, TypeError, ValueError) as err:
        raise PrometheusResponseError(f"sample without a numeric `value` pair: {sample!r}") from err
    return value if math.isfinite(value) else None


def parse_vector(
    metric: Metric, result: Sequence[Mapping[str, Any]], labels: LabelNames
) -> dict[GroupKey, dict[int, float]]:
    """`{(deployment, version): {position: value}}`; position 0 for metrics without positions."""
    out: dict[GroupKey, dict[int, float]] = {}
    for sample in result:
        series = sample.get("metric")
        if not isinstance(series, Mapping):
            raise PrometheusResponseError(f"{metric.value}: sample without a `metric` label map: {sample!r}")
        namespace, name = series.get(labels.namespace), series.get(labels.deployment)
        value = sample_value(sample)
        if not namespace or not name or value is None:
            continue  # not a TideDeployment series, or no data
        key = (DeploymentKey(namespace, name), series.get(labels.version) or None)
        out.setdefault(key, {})[_position(metric, series, labels)] = value
    return out


def _position(metric: Metric, series: Mapping[str, str], labels: LabelNames) -> int:
    if metric is not Metric.ACCEPTED_PER_POSITION:
        return 0
    raw = series.get(labels.position, "")
    if not raw.isdigit():
        raise PrometheusResponseError(f"{metric.value}: label {labels.position}={raw!r} is not a position")
    return int(raw)


@dataclass(frozen=True)
class RawGroup:
    """Sums over one group's pods: counts over the window, rates and gauges now."""

    values: Mapping[Metric, Mapping[int, float]] = field(default_factory=dict)

    def get(self, metric: Metric) -> float | None:
        return self.values.get(metric, {}).get(0)

    def per_position(self) -> tuple[float, ...]:
        by_position = self.values.get(Metric.ACCEPTED_PER_POSITION, {})
        if not by_position:
            return ()
        return tuple(by_position.get(i, 0.0) for i in range(max(by_position) + 1))

    def merged(self, other: RawGroup) -> RawGroup:
        values: dict[Metric, dict[int, float]] = {m: dict(v) for m, v in self.values.items()}
        for metric, by_position in other.values.items():
            target = values.setdefault(metric, {})
            for position, value in by_position.items():
                target[position] = target.get(position, 0.0) + value
        return RawGroup(values)


def group_results(parsed: Mapping[Metric, Mapping[GroupKey, Mapping[int, float]]]) -> dict[GroupKey, RawGroup]:
    """Regroup per-metric answers into one RawGroup per (deployment, version)."""
    values: dict[GroupKey, dict[Metric, Mapping[int, float]]] = {}
    for metric, groups in parsed.items():
        for key, by_position in groups.items():
            values.setdefault(key, {})[metric] = by_position
    return {key: RawGroup(v) for key, v in values.items()}
