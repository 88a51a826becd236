"""PromQL built by pure functions, and the parsing of instant vectors."""

from __future__ import annotations

import pytest

from tide_operator.adapters.prometheus_adapter_queries import (
    DeploymentKey,
    LabelNames,
    Metric,
    PrometheusResponseError,
    build_queries,
    build_query,
    duration,
    group_results,
    parse_vector,
    sample_value,
)

LABELS = LabelNames()


def test_acceptance_query_joins_the_draft_version_and_groups_all_deployments() -> None:
    q = build_query(Metric.ACCEPTED_TOKENS, LABELS, 60)
    series = 'increase(vllm:spec_decode_num_accepted_tokens_total{label_tide_dev_deployment!=""}[60s])'
    assert q == (
        "sum by (namespace, label_tide_dev_deployment, version) ("
        f"({series}"
        " * on(namespace, pod) group_left(version) max by (namespace, pod, version)"
        " (topk by (namespace, pod) (1, tide_draft_info)))"
        f" or on(namespace, pod) {series})"
    )


def test_one_query_per_metric_and_none_names_a_deployment() -> None:
    queries = build_queries(LABELS, 30)
    assert set(queries) == set(Metric)
    assert len(set(queries.values())) == len(Metric)
    for q in queries.values():
        assert 'label_tide_dev_deployment!=""' in q  # every TideDeployment, no single object named
        assert "group_left(version)" in q


def test_per_position_groups_by_position_and_gauges_are_not_rated() -> None:
    per_pos = build_query(Metric.ACCEPTED_PER_POSITION, LABELS, 60)
    assert per_pos.startswith("sum by (namespace, label_tide_dev_deployment, version, position) (")
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in per_pos
    running = build_query(Metric.REQUESTS_RUNNING, LABELS, 60)
    assert "rate(" not in running
    assert "increase(" not in running
    assert "rate(vllm:generation_tokens_total" in build_query(Metric.GENERATION_RATE, LABELS, 60)
    assert "* 0 + 1" in build_query(Metric.ENGINES, LABELS, 60)


def test_label_names_are_configurable_for_a_pod_monitor() -> None:
    labels = LabelNames(namespace="kubernetes_namespace", pod="kubernetes_pod_name", deployment="tide_deployment")
    q = build_query(Metric.DRAFTS, labels, 120)
    assert "sum by (kubernetes_namespace, tide_deployment, version)" in q
    assert "on(kubernetes_namespace, kubernetes_pod_name) group_left(version)" in q
    assert "[120s]" in q
    assert "label_tide_dev_deployment" not in q


@pytest.mark.parametrize(("seconds", "expected"), [(60, "60s"), (1.4, "1s"), (300.0, "300s")])
def test_duration(seconds: float, expected: str) -> None:
    assert duration(seconds) == expected


def test_duration_below_a_second_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1s"):
        duration(0.5)


def _sample(value: str, **labels: str) -> dict[str, object]:
    return {"metric": labels, "value": [1700000000.0, value]}


def test_nan_and_inf_are_no_data_never_zero() -> None:
    assert sample_value(_sample("NaN")) is None
    assert sample_value(_sample("+Inf")) is None
    assert sample_value(_sample("0")) == 0.0


def test_parse_keys_by_deployment_and_version_and_skips_foreign_series() -> None:
    result = [
        _sample("12", namespace="a", label_tide_dev_deployment="llama", version="v2"),
        _sample("3", namespace="a", label_tide_dev_deployment="llama"),  # pod without draft info
        _sample("7", namespace="b", label_tide_dev_deployment="qwen", version="initial"),
        _sample("NaN", namespace="b", label_tide_dev_deployment="other", version="v1"),
        _sample("5", namespace="c"),  # not a TideDeployment series
    ]
    parsed = parse_vector(Metric.DRAFTS, result, LABELS)
    assert parsed == {
        (DeploymentKey("a", "llama"), "v2"): {0: 12.0},
        (DeploymentKey("a", "llama"), None): {0: 3.0},
        (DeploymentKey("b", "qwen"), "initial"): {0: 7.0},
    }


def test_parse_positions() -> None:
    result = [
        _sample("40", namespace="a", label_tide_dev_deployment="d", version="v1", position="1"),
        _sample("70", namespace="a", label_tide_dev_deployment="d", version="v1", position="0"),
    ]
    parsed = parse_vector(Metric.ACCEPTED_PER_POSITION, result, LABELS)
    groups = group_results({Metric.ACCEPTED_PER_POSITION: parsed})
    assert groups[(DeploymentKey("a", "d"), "v1")].per_position() == (70.0, 40.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"value": [0, "1"]},  # no metric map
        {"metric": {"namespace": "a", "label_tide_dev_deployment": "d"}, "value": "1"},
        {"metric": {"namespace": "a", "label_tide_dev_deployment": "d"}, "value": [0, "x"]},
    ],
)
def test_malformed_samples_raise_a_typed_error(bad: dict[str, object]) -> None:
    with pytest.raises(PrometheusResponseError):
        parse_vector(Metric.DRAFTS, [bad], LABELS)


def test_a_non_numeric_position_is_refused() -> None:
    bad = _sample("1", namespace="a", label_tide_dev_deployment="d", position="first")
    with pytest.raises(PrometheusResponseError, match="position"):
        parse_vector(Metric.ACCEPTED_PER_POSITION, [bad], LABELS)
