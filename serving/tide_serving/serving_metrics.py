"""The plugin's metrics on vLLM's /metrics (names and labels: docs/contracts/serving-control.md).

A prometheus_client collector reads the control state's last snapshot of the workers' status (kept
fresh by a background task), so a scrape never waits on the engine. Registered on the default
registry, which vLLM's /metrics serves when it runs one API server process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric

from tide_contracts import serving_control as sc

if TYPE_CHECKING:
    from tide_serving.control_state import ControlState

_COUNTERS = (
    (sc.METRIC_CAPTURE_TOKENS, "captured_tokens", "Accepted tokens captured (shard rows)."),
    (sc.METRIC_CAPTURE_BYTES, "captured_bytes", "Shard bytes written."),
    (sc.METRIC_CAPTURE_SHARDS, "shards_written", "Shards written."),
    (sc.METRIC_CAPTURE_DROPPED, "dropped_samples", "Captured requests dropped (buffer full)."),
    (sc.METRIC_CAPTURE_WRITE_ERRORS, "write_errors", "Failed shard writes."),
    (sc.METRIC_CAPTURE_ENGINE_SECONDS, "engine_seconds", "Engine-loop time spent on capture."),
    (sc.METRIC_CAPTURE_WRITER_SECONDS, "writer_seconds", "Writer-thread time building and uploading shards."),
)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels)


class ServingCollector:
    def __init__(self, control: ControlState) -> None:
        self.control = control

    def describe(self) -> list[Metric]:
        return []  # dynamic: collected on scrape only

    def collect(self) -> Iterator[Metric]:
        c = self.control
        model = [c.model_name]
        info = GaugeMetricFamily(sc.METRIC_PLUGIN_INFO, "Serving plugin and engine versions.",
                                 labels=["plugin_version", "vllm_version", "contract_version",
                                         "engine_supported"])
        info.add_metric([c.plugin_version, c.vllm_version, str(sc.CONTRACT_VERSION),
                         "true" if c.engine_supported else "false"], 1)
        yield info
        draft = c.draft_identity()
        if draft is not None:
            g = GaugeMetricFamily(sc.METRIC_DRAFT_INFO, "The draft serving now.",
                                  labels=["model_name", "version", "target_revision"])
            g.add_metric([c.model_name, draft[0], draft[1]], 1)
            yield g
        yield _gauge(sc.METRIC_SPECULATION_ENABLED, "1 while speculation is on.", model,
                     1.0 if c.speculation_enabled() else 0.0)
        capture = c.capture_snapshot()
        yield _gauge(sc.METRIC_CAPTURE_ENABLED, "1 while capture is on.", model, float(capture.enabled))
        yield _gauge(sc.METRIC_CAPTURE_SAMPLING_RATE, "Fraction of requests captured.", model,
                     capture.sampling_rate)
        counters = capture.counters.model_dump()
        for name, field, doc in _COUNTERS:
            m = _counter(name, doc, ["model_name"])
            m.add_metric(model, float(counters[field]))
            yield m
        swaps = _counter(sc.METRIC_DRAFT_SWAPS, "Draft loads by outcome.", ["model_name", "result"])
        for result, n in sorted(c.swap_results.items()):
            swaps.add_metric([c.model_name, result], float(n))
        yield swaps
        yield _gauge(sc.METRIC_DRAFT_SWAP_PAUSE, "Generation pause of the last successful swap.", model,
                     c.last_pause_s)


def _gauge(name: str, doc: str, labels: list[str], value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["model_name"])
    g.add_metric(labels, value)
    return g


def register(control: ControlState) -> ServingCollector:
    collector = ServingCollector(control)
    REGISTRY.register(collector)
    return collector
