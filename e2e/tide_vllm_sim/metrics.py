"""/metrics: vLLM's own names, types and labels, plus the serving plugin's (contract) metrics.

Rendered by prometheus_client (the library vLLM uses), so the exposition format is the real one:
counters end in `_total`, the histogram has `_bucket{le}`, `_sum` and `_count`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from tide_contracts import serving_control as sc
from tide_vllm_sim.control import PLUGIN_VERSION, VLLM_VERSION, PodControl

_ENGINE_LABELS = ["model_name", "engine"]
_CAPTURE_COUNTERS = (
    (sc.METRIC_CAPTURE_TOKENS, "captured_tokens"),
    (sc.METRIC_CAPTURE_BYTES, "captured_bytes"),
    (sc.METRIC_CAPTURE_SHARDS, "shards_written"),
    (sc.METRIC_CAPTURE_DROPPED, "dropped_samples"),
    (sc.METRIC_CAPTURE_WRITE_ERRORS, "write_errors"),
)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels)


def _gauge(name: str, doc: str, labels: list[str], values: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    family.add_metric(values, value)
    return family


class SimCollector:
    def __init__(self, pod: PodControl) -> None:
        self.pod = pod

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._engine_metrics()
        if self.pod.engine.num_speculative_tokens:
            yield from self._spec_decode_metrics()
        yield from self._plugin_metrics()

    def _engine_metrics(self) -> Iterator[Metric]:
        engine = self.pod.engine
        labels = [self.pod.model_name, "0"]
        with engine.lock:
            running, waiting = engine.running_and_waiting()
            c = engine.counters
            prompt, generated, success = c.prompt_tokens, int(c.generation_tokens), dict(c.success)
            hist = c.e2e_latency
            buckets = [(f"{le:g}" if le != int(le) else f"{le:.1f}", n) for le, n in
                       zip(hist.buckets, hist.counts or [0] * len(hist.buckets), strict=True)]
            buckets.append(("+Inf", hist.count))
            hist_sum = hist.total
        yield _gauge("vllm:num_requests_running", "Requests in model execution batches.", _ENGINE_LABELS,
                     labels, running)
        yield _gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", _ENGINE_LABELS, labels, waiting)
        yield _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", _ENGINE_LABELS,
                     labels, running / engine.max_num_seqs)
        for name, doc, value in (("vllm:prompt_tokens_total", "Prefill tokens processed.", prompt),
                                 ("vllm:generation_tokens_total", "Generation tokens processed.", generated)):
            family = _counter(name, doc, _ENGINE_LABELS)
            family.add_metric(labels, value)
            yield family
        family = _counter("vllm:request_success_total", "Successfully processed requests.",
                          [*_ENGINE_LABELS, "finished_reason"])
        for reason in ("stop", "length", "abort", "error", "repetition"):
            family.add_metric([*labels, reason], success.get(reason, 0))
        yield family
        histogram = HistogramMetricFamily("vllm:e2e_request_latency_seconds",
                                          "Histogram of e2e request latency in seconds.", labels=_ENGINE_LABELS)
        histogram.add_metric(labels, buckets, hist_sum)
        yield histogram

    def _spec_decode_metrics(self) -> Iterator[Metric]:
        engine = self.pod.engine
        labels = [self.pod.model_name, "0"]
        with engine.lock:
            drafts, draft_tokens, accepted, per_position = engine.counters.spec.exposed()
        per_position += [0] * (engine.num_speculative_tokens - len(per_position))
        for name, doc, value in (
            ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", drafts),
            ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", draft_tokens),
            ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", accepted),
        ):
            family = _counter(name, doc, _ENGINE_LABELS)
            family.add_metric(labels, value)
            yield family
        family = _counter("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                          "Accepted tokens per draft position.", [*_ENGINE_LABELS, "position"])
        for position, value in enumerate(per_position):
            family.add_metric([*labels, str(position)], value)
        yield family

    def _plugin_metrics(self) -> Iterator[Metric]:
        pod = self.pod
        model = [pod.model_name]
        yield _gauge(sc.METRIC_PLUGIN_INFO, "Serving plugin and engine versions.",
                     ["plugin_version", "vllm_version", "contract_version", "engine_supported"],
                     [PLUGIN_VERSION, VLLM_VERSION, str(sc.CONTRACT_VERSION), "true"], 1)
        draft = pod.draft_info()
        if draft is not None:
            yield _gauge(sc.METRIC_DRAFT_INFO, "The draft serving now.", ["model_name", "version", "target_revision"],
                         [pod.model_name, draft.version, draft.target_revision], 1)
        yield _gauge(sc.METRIC_SPECULATION_ENABLED, "1 while speculation is on.", ["model_name"], model,
                     float(pod.engine.speculative_tokens() > 0))
        capture = pod.capture.state()
        yield _gauge(sc.METRIC_CAPTURE_ENABLED, "1 while capture is on.", ["model_name"], model, float(capture.enabled))
        yield _gauge(sc.METRIC_CAPTURE_SAMPLING_RATE, "Fraction of requests captured.", ["model_name"], model,
                     capture.sampling_rate)
        counters = capture.counters.model_dump()
        for name, key in _CAPTURE_COUNTERS:
            family = _counter(name, name, ["model_name"])
            family.add_metric(model, counters[key])
            yield family
        swaps = _counter(sc.METRIC_DRAFT_SWAPS, "Draft loads by outcome.", ["model_name", "result"])
        for result, n in sorted(pod.swap_results.items()):
            swaps.add_metric([pod.model_name, result], n)
        yield swaps
        yield _gauge(sc.METRIC_DRAFT_SWAP_PAUSE, "Generation pause of the last successful swap.", ["model_name"],
                     model, pod.last_pause_s)


def render(pod: PodControl) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimCollector(pod))
    return generate_latest(registry)
