"""The scale benchmark's pure parts: quantiles from the operator's histogram, per-pass arithmetic,
the audit log's classification, the table's growth per deployment, and --check's targets."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench.scale import measure  # noqa: E402
from bench.scale.report import Measurement, bucket_delta, check, quantile, slope, table  # noqa: E402
from tide_operator.metrics import OperatorMetrics  # noqa: E402

INF = math.inf
BUCKETS = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (INF, 40.0)]


def test_quantile_interpolates_within_the_bucket_like_histogram_quantile() -> None:
    assert quantile(0.5, BUCKETS) == pytest.approx(0.1 + 0.4 * 10 / 20)  # rank 20 of 40, in (0.1, 0.5]
    assert quantile(0.99, BUCKETS) == pytest.approx(0.5 + 0.5 * 9.6 / 10)
    assert quantile(0.1, BUCKETS) == pytest.approx(0.04)  # the first bucket's lower bound is 0
    # A rank in +Inf answers the largest finite bound; no observations answers nothing.
    assert quantile(0.99, [(1.0, 40.0), (INF, 50.0)]) == 1.0
    assert quantile(0.5, [(1.0, 0.0), (INF, 0.0)]) is None
    with pytest.raises(ValueError, match="q"):
        quantile(1.5, BUCKETS)


def test_window_buckets_and_quantile_from_the_operators_own_histogram() -> None:
    metrics = OperatorMetrics()
    for _ in range(50):
        metrics.record_reconcile(0.02)
    before = measure.reconcile_buckets(generate_latest(metrics.registry).decode())
    for _ in range(99):
        metrics.record_reconcile(0.3)  # in (0.25, 0.5]
    metrics.record_reconcile(4.0)  # in (2.5, 5]
    window = bucket_delta(measure.reconcile_buckets(generate_latest(metrics.registry).decode()), before)
    assert window[-1] == (INF, 100.0)  # the earlier 50 passes are not the window's
    assert 0.25 < quantile(0.5, window) < 0.5
    assert quantile(0.995, window) > 2.5


def test_instant_queries_counts_only_the_query_handler() -> None:
    text = ('# TYPE prometheus_http_requests_total counter\n'
            'prometheus_http_requests_total{code="200",handler="/api/v1/query"} 7\n'
            'prometheus_http_requests_total{code="400",handler="/api/v1/query"} 2\n'
            'prometheus_http_requests_total{code="200",handler="/api/v1/query_range"} 5\n')
    assert measure.instant_queries(text) == 9


def _event(verb: str, agent: str, user: str = "tide-operator", resource: str = "pods") -> str:
    return json.dumps({"stage": "ResponseComplete", "verb": verb, "userAgent": agent, "user": {"username": user},
                       "objectRef": {"resource": resource}})


def test_audit_counts_split_pass_lists_from_kopf_relists(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    early = _event("list", "OpenAPI-Generator/12/python") + "\n"
    lines = [_event("get", "OpenAPI-Generator/12/python", resource="secrets"),
             _event("list", "OpenAPI-Generator/12/python"), _event("list", "kopf/1.37"),
             _event("patch", "kopf/1.37", resource="tidedeployments"), _event("create", "kopf/1.37", resource="events"),
             _event("get", "OpenAPI-Generator/12/python", user="admin"),
             json.dumps({"stage": "ResponseStarted", "verb": "get", "user": {"username": "tide-operator"}})]
    log.write_text(early + "\n".join(lines) + '\n{"stage": "ResponseComp')  # the last line still being written
    calls = measure.count_calls(log, "tide-operator", len(early), log.stat().st_size)
    assert (calls.gets, calls.writes, calls.lists, calls.relists) == (1, 2, 1, 1)
    assert calls.by_call["list pods (kopf)"] == 1


def _row(size: int, **values: float) -> Measurement:
    base = {"with_pods": min(size, 20), "window_s": 60.0, "prometheus_interval_s": 10.0, "passes": 4 * size,
            "rss_mib": 100.0, "gets": 8 * size, "writes": 0, "lists": 0, "relists": 0, "promql_queries": 36,
            "p50_s": 0.05, "p99_s": 0.4}
    return Measurement(size=size, **{**base, **values})


def test_per_pass_and_per_interval_arithmetic() -> None:
    m = _row(10, passes=20, gets=30, writes=10, lists=2, promql_queries=42, window_s=60.0)
    assert m.per_pass(m.gets) == 1.5
    assert m.requests_per_pass == 2.1  # (30 + 10 + 2) / 20
    assert m.promql_per_interval == 7.0  # 42 queries over 6 intervals of 10 s
    assert _row(10, passes=0).requests_per_pass is None


def test_table_prints_each_size_and_the_growth_per_deployment() -> None:
    lines = table([_row(10, rss_mib=90.0, p99_s=0.2), _row(30, rss_mib=110.0, p99_s=0.6)])
    assert lines[0].split()[0] == "N"
    assert [line.split()[0] for line in lines[1:3]] == ["10", "30"]
    growth = lines[lines.index("growth per deployment between sizes (slope):") + 1].split()
    assert growth[0] == "10->30"
    assert float(growth[1]) == pytest.approx(1.0)  # RSS: 20 MiB over 20 deployments
    assert float(growth[-1]) == pytest.approx(0.02)  # p99: 0.4 s over 20 deployments
    assert lines[-1] == "requests per pass (get+write+list) by N: 10: 2.00, 30: 2.00"
    assert slope(None, 1.0, 10, 30) is None


def test_check_holds_on_a_flat_fleet_and_names_each_missed_target() -> None:
    small, large = _row(10), _row(100)
    assert check([small, large]) == []
    cases = {"RSS": replace(large, rss_mib=250.0), "LIST calls": replace(large, lists=3),
             "p99": replace(large, p99_s=2.5), "PromQL": replace(large, promql_queries=360),
             "requests per pass": replace(large, gets=40 * 100), "no reconcile pass": replace(large, passes=0)}
    for what, bad in cases.items():
        assert any(what in line for line in check([small, bad])), what
    # Only the largest size is held to the absolute targets; one size cannot show growth.
    assert check([replace(small, rss_mib=300.0), large]) == []
    assert check([replace(large, promql_queries=3600)]) == []
    assert check([]) == ["no measurement"]


def test_the_fleets_spec_pools_and_config_are_accepted_by_the_operator_and_the_plane(tmp_path: Path) -> None:
    from bench.scale import fleet
    from tide_localcluster.nodepools import load_pools
    from tide_operator.api.validation import parse_spec
    from tide_operator.config import OperatorConfig, load_operator_config

    for replicas in (0, 1):
        parsed = parse_spec(fleet.spec("http://127.0.0.1:9000", replicas))
        assert parsed.inference.replicas == replicas
        assert not parsed.control.capture.enabled
    nodes = load_pools(fleet.write_pools(tmp_path / "pools.yaml", 20)).nodes()
    h100_gpus = sum(8 for n in nodes if n.labels.get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3")
    assert h100_gpus >= 20 + 8  # every simulator pod, and a spare node
    config = load_operator_config(fleet.operator_config(tmp_path / "scenario.yaml"))
    defaults = OperatorConfig()  # the product's cadence, not the integration tests' 2 s
    assert (config.resync_interval_seconds, config.prometheus_interval_seconds) == (
        defaults.resync_interval_seconds, defaults.prometheus_interval_seconds)
