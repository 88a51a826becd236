"""The adapter over a fake query function: ratios, per-version groups, batching, caching, errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tide_operator.adapters.prometheus_adapter import (
    AdapterConfig,
    PrometheusAdapter,
    PrometheusAdapters,
    PrometheusUnavailable,
)
from tide_operator.adapters.prometheus_adapter_metrics import observation
from tide_operator.adapters.prometheus_adapter_queries import DeploymentKey, Metric
from tide_operator.config import OperatorConfig
from tide_operator.control.prometheus_access import PrometheusConnection

LLAMA = DeploymentKey("team-a", "llama")
QWEN = DeploymentKey("team-b", "qwen")


def _s(value: float, ns: str, dep: str, version: str | None, **extra: str) -> dict[str, Any]:
    labels = {"namespace": ns, "label_tide_dev_deployment": dep, **extra}
    if version is not None:
        labels["version"] = version
    return {"metric": labels, "value": [0, repr(value)]}


# Two deployments. llama: v1 on 2 engines (a = 0.8, g = 2), canary v2 on 1 engine (a = 0.5), one pod
# without a draft. qwen: pods without traffic on the spec counters (all zero).
ANSWERS: dict[Metric, list[dict[str, Any]]] = {
    Metric.DRAFTS: [_s(1000, "team-a", "llama", "v1"), _s(400, "team-a", "llama", "v2"),
                    _s(0, "team-b", "qwen", "v1")],
    Metric.DRAFT_TOKENS: [_s(2000, "team-a", "llama", "v1"), _s(800, "team-a", "llama", "v2"),
                          _s(0, "team-b", "qwen", "v1")],
    Metric.ACCEPTED_TOKENS: [_s(1440, "team-a", "llama", "v1"), _s(300, "team-a", "llama", "v2"),
                             _s(0, "team-b", "qwen", "v1")],
    Metric.ACCEPTED_PER_POSITION: [
        _s(800, "team-a", "llama", "v1", position="0"), _s(640, "team-a", "llama", "v1", position="1"),
        _s(200, "team-a", "llama", "v2", position="0"), _s(100, "team-a", "llama", "v2", position="1"),
    ],
    Metric.GENERATION_RATE: [_s(300, "team-a", "llama", "v1"), _s(100, "team-a", "llama", "v2"),
                             _s(50, "team-a", "llama", None), _s(0, "team-b", "qwen", "v1")],
    Metric.REQUESTS_RUNNING: [_s(12, "team-a", "llama", "v1"), _s(5, "team-a", "llama", "v2"),
                              _s(3, "team-a", "llama", None), _s(0, "team-b", "qwen", "v1")],
    Metric.ENGINES: [_s(2, "team-a", "llama", "v1"), _s(1, "team-a", "llama", "v2"),
                     _s(1, "team-a", "llama", None), _s(1, "team-b", "qwen", "v1")],
}


class FakePrometheus:
    def __init__(self, answers: Mapping[Metric, list[dict[str, Any]]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, float]] = []
        self.down = False
        self.queries: dict[str, Metric] = {}

    def __call__(self, promql: str, at: float) -> Sequence[Mapping[str, Any]]:
        self.calls.append((promql, at))
        if self.down:
            raise PrometheusUnavailable("fake", "connection refused")
        return self.answers.get(self.queries[promql], [])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Answers = Mapping[Metric, list[dict[str, Any]]]


def _adapter(answers: Answers = ANSWERS, *, poll: bool = False) -> tuple[PrometheusAdapter, FakePrometheus, Clock]:
    """Without poll, reads fetch lazily (the fallback when no poller runs); tests of the poller
    drive its ticks through `refresh()` on the fake clock (its thread waits in real seconds)."""
    fake, clock = FakePrometheus(answers), Clock()
    adapter = PrometheusAdapter("http://prom", AdapterConfig(interval_s=10), query=fake, clock=clock, poll=poll)
    fake.queries = {q: m for m, q in adapter.queries.items()}
    return adapter, fake, clock


def test_per_version_numbers_follow_vllm_definitions() -> None:
    adapter, _, _ = _adapter()
    llama = adapter.deployment(LLAMA)
    assert llama is not None
    v1, v2 = llama.by_version["v1"], llama.by_version["v2"]
    assert v1.acceptance_rate == pytest.approx(0.72)
    assert v1.acceptance_length == pytest.approx(2.44)
    assert v1.per_position_acceptance == pytest.approx((0.8, 0.64))
    assert v1.batch_size == pytest.approx(6.0)
    assert v2.acceptance_length == pytest.approx(1.75)
    assert llama.by_version[None].acceptance_length is None  # no drafts: no data, not 0


def test_deployment_totals_are_sums_not_averages() -> None:
    adapter, _, _ = _adapter()
    total = adapter.deployment(LLAMA).total  # type: ignore[union-attr]
    assert total.acceptance_rate == pytest.approx((1440 + 300) / (2000 + 800))
    assert total.acceptance_length == pytest.approx(1 + 1740 / 1400)
    assert total.per_position_acceptance == pytest.approx((1000 / 1400, 740 / 1400))
    assert total.generation_throughput == pytest.approx(450)
    assert total.requests_running == pytest.approx(20)
    assert total.batch_size == pytest.approx(5.0)  # 20 running over 4 engines
    assert total.drafted_tokens == 2800


def test_zero_traffic_is_insufficient_data() -> None:
    adapter, _, _ = _adapter()
    qwen = adapter.deployment(QWEN)
    assert qwen is not None
    assert qwen.total.acceptance_rate is None
    assert qwen.total.acceptance_length is None
    assert qwen.total.per_position_acceptance == ()
    assert qwen.total.drafted_tokens == 0
    assert qwen.total.batch_size == 0.0  # a measured idle gauge is a real 0
    assert adapter.deployment(DeploymentKey("team-c", "absent")) is None


def test_one_query_per_metric_per_interval_for_all_deployments() -> None:
    adapter, fake, clock = _adapter()
    adapter.deployment(LLAMA)
    adapter.deployment(QWEN)
    clock.now += 9
    adapter.deployment(LLAMA)
    assert len(fake.calls) == len(Metric)
    assert len({at for _, at in fake.calls}) == 1  # every query evaluated at the same instant
    clock.now += 1
    adapter.deployment(QWEN)
    assert len(fake.calls) == 2 * len(Metric)


def test_queries_are_evaluated_a_settle_time_in_the_past() -> None:
    """Every query of a snapshot reads the same ingested scrapes: evaluated at now, a scrape ingested
    between two of them skews the ratio of their answers (accepted tokens over drafts)."""
    fake, clock = FakePrometheus(ANSWERS), Clock()
    adapter = PrometheusAdapter("http://prom", AdapterConfig(interval_s=10, settle_s=5), query=fake, clock=clock,
                                poll=False)
    fake.queries = {q: m for m, q in adapter.queries.items()}
    adapter.deployment(LLAMA)
    assert {at for _, at in fake.calls} == {clock.now - 5}
    clock.now += 4
    adapter.deployment(LLAMA)  # the snapshot is still fresh: its age counts from when it was fetched
    assert len(fake.calls) == len(Metric)
    assert OperatorConfig().prometheus_settle_seconds == 5.0  # what the operator runs with


def test_unreachable_raises_typed_error_and_is_remembered_for_the_interval() -> None:
    adapter, fake, clock = _adapter()
    fake.down = True
    with pytest.raises(PrometheusUnavailable, match="connection refused"):
        adapter.deployment(LLAMA)
    with pytest.raises(PrometheusUnavailable):
        adapter.deployment(QWEN)
    assert len(fake.calls) == 1
    fake.down = False
    clock.now += 10
    assert adapter.deployment(LLAMA) is not None  # recovers at the next interval


def test_a_malformed_answer_is_unavailable_naming_the_metric() -> None:
    answers = dict(ANSWERS)
    answers[Metric.DRAFTS] = [{"metric": {"namespace": "a", "label_tide_dev_deployment": "d"}, "value": "x"}]
    adapter, _, _ = _adapter(answers)
    with pytest.raises(PrometheusUnavailable, match="bad answer to drafts"):
        adapter.snapshot()


def test_observation_reads_the_served_version_and_splits_canary_from_control() -> None:
    adapter, _, _ = _adapter()
    obs = observation(adapter.deployment(LLAMA), served_version="v1", candidate_version="v2")
    assert obs.per_position_acceptance == pytest.approx((0.8, 0.64))
    assert obs.acceptance_samples == 2000
    assert obs.batch_size == pytest.approx(5.0)
    assert obs.canary is not None
    assert obs.control is not None
    assert obs.canary.acceptance_length == pytest.approx(1.75)
    assert obs.canary.generation_throughput == pytest.approx(100)
    assert obs.control.acceptance_length == pytest.approx(2.44)  # v1's drafts; draftless pod adds none
    assert obs.control.generation_throughput == pytest.approx(350 / 3)
    # Position 0's acceptance per group: a itself whatever g each group ran (the canary analysis keeps it).
    assert obs.canary.per_token_acceptance == pytest.approx(0.5)
    assert obs.control.per_token_acceptance == pytest.approx(0.8)
    assert set(obs.by_version) == {"v1", "v2"}


def test_a_canary_speculating_alone_never_passes_for_the_served_draft() -> None:
    """The fleet's switch is off (v1's pods draft nothing) while the canary's pods (v2) speculate alone."""
    quiet = {metric: [s for s in series if s["metric"].get("version") != "v1" or metric in _SERVING]
             for metric, series in ANSWERS.items()}
    adapter, _, _ = _adapter(quiet)
    obs = observation(adapter.deployment(LLAMA), served_version="v1", candidate_version="v2")
    assert obs.acceptance_samples == 0  # no acceptance of the served draft: the policy keeps its estimate
    assert obs.per_position_acceptance == ()
    assert obs.canary is not None
    assert obs.canary.per_token_acceptance == pytest.approx(0.5)  # the canary is measured
    # Without a canary every pod counts, as before.
    assert observation(adapter.deployment(LLAMA), served_version="v1").acceptance_samples == 800


_SERVING = (Metric.GENERATION_RATE, Metric.REQUESTS_RUNNING, Metric.ENGINES)


def test_observation_without_series_is_empty() -> None:
    obs = observation(None)
    assert obs.acceptance_rate is None
    assert obs.batch_size is None
    assert obs.acceptance_samples == 0


def test_deployments_sharing_an_endpoint_share_one_adapter() -> None:
    made: list[str] = []

    def factory(connection: PrometheusConnection, config: AdapterConfig) -> PrometheusAdapter:
        made.append(connection.url)
        return PrometheusAdapter(connection, config, query=lambda q, t: [])

    adapters = PrometheusAdapters(factory=factory)
    assert adapters.for_endpoint("http://p:9090/") is adapters.for_endpoint("http://p:9090")
    assert adapters.for_endpoint("http://q:9090") is not adapters.for_endpoint("http://p:9090")
    assert made == ["http://p:9090", "http://q:9090"]


def test_http_errors_become_prometheus_unavailable() -> None:
    # A closed loopback port: the real client path, no server needed.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    adapter = PrometheusAdapter(f"http://127.0.0.1:{port}", AdapterConfig(timeout_s=1))
    with pytest.raises(PrometheusUnavailable, match=f"127.0.0.1:{port}"):
        adapter.snapshot()


@pytest.mark.parametrize(("status", "body"), [(200, b"<html>not prometheus</html>"), (200, b'{"status": "success"}'),
                                              (400, b'{"status": "error", "error": "parse error"}')])
def test_bad_answers_become_prometheus_unavailable(status: int, body: bytes) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        adapter = PrometheusAdapter(f"http://127.0.0.1:{server.server_port}", AdapterConfig(timeout_s=2))
        with pytest.raises(PrometheusUnavailable):
            adapter.snapshot()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("status", "refused"), [(401, True), (403, True), (500, False), (400, False)])
def test_a_refused_answer_reports_the_credentials_it_refused(status: int, refused: bool) -> None:
    """A 401/403 hands the connection's secrets to on_refused (the Secret holding them is read again)."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from tide_operator.control.prometheus_access import PrometheusAuth

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    reported: list[Sequence[str]] = []
    try:
        connection = PrometheusConnection(f"http://127.0.0.1:{server.server_port}", PrometheusAuth(token="t0k"))
        adapters = PrometheusAdapters(AdapterConfig(timeout_s=2, interval_s=0), on_refused=reported.append)
        with pytest.raises(PrometheusUnavailable, match="credentials refused" if refused else "query failed"):
            adapters.for_connection(connection).snapshot()
    finally:
        server.shutdown()
        server.server_close()
    assert len(reported) == (1 if refused else 0)
    assert all("t0k" in secrets for secrets in reported)
