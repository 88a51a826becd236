from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tide_operator import metrics
from tide_operator.metrics import OperatorMetrics


@pytest.fixture
def m() -> OperatorMetrics:
    return OperatorMetrics(CollectorRegistry())


def value(m: OperatorMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_decisions_are_counted_by_deployment_action_and_reason(m: OperatorMetrics) -> None:
    m.record_decision("RollBack", "CanaryAborted", "llm", "chat")
    m.record_decision("RollBack", "CanaryAborted", "llm", "chat")
    m.record_decision("Promote", "Promoted", "llm", "chat")
    labels = {"tide_namespace": "llm", "tide_deployment": "chat"}
    assert value(m, "tide_operator_decisions_total", **labels, action="RollBack", reason="CanaryAborted") == 2
    assert value(m, "tide_operator_decisions_total", **labels, action="Promote", reason="Promoted") == 1


def test_phase_is_a_state_set(m: OperatorMetrics) -> None:
    m.set_phase("llm", "chat", "Collecting")
    m.set_phase("llm", "chat", "Training")
    phases = {p: value(m, "tide_operator_phase", tide_namespace="llm", tide_deployment="chat", phase=p)
              for p in ("Collecting", "Training", "Serving")}
    assert phases == {"Collecting": 0, "Training": 1, "Serving": 0}
    with pytest.raises(ValueError, match="phase: 'Sleeping'"):
        m.set_phase("llm", "chat", "Sleeping")


def test_reconcile_duration_lands_in_histogram_buckets(m: OperatorMetrics) -> None:
    m.record_reconcile(0.03)
    m.record_reconcile(3.0)
    assert value(m, "tide_operator_reconcile_duration_seconds_count") == 2
    assert value(m, "tide_operator_reconcile_duration_seconds_bucket", le="0.05") == 1
    assert value(m, "tide_operator_reconcile_duration_seconds_sum") == pytest.approx(3.03)


def test_errors_start_at_zero_and_reject_unknown_kinds(m: OperatorMetrics) -> None:
    assert value(m, "tide_operator_errors_total", kind="s3") == 0
    m.record_error("prometheus")
    assert value(m, "tide_operator_errors_total", kind="prometheus") == 1
    with pytest.raises(ValueError, match="kind: 'redis'"):
        m.record_error("redis")


def test_training_jobs_and_speculation_and_forget(m: OperatorMetrics) -> None:
    m.record_training_job("llm", "chat", "failed")
    m.set_speculation("llm", "chat", True, 1.35)
    m.set_phase("llm", "chat", "Serving")
    labels = {"tide_namespace": "llm", "tide_deployment": "chat"}
    assert value(m, "tide_operator_training_jobs_total", **labels, outcome="failed") == 1
    assert value(m, "tide_operator_speculation_enabled", **labels) == 1
    assert value(m, "tide_operator_modelled_speedup_ratio", **labels) == 1.35
    with pytest.raises(ValueError, match="outcome"):
        m.record_training_job("llm", "chat", "exploded")
    m.forget("llm", "chat")
    m.forget("llm", "never-seen")
    assert value(m, "tide_operator_speculation_enabled", **labels) is None
    assert value(m, "tide_operator_phase", **labels, phase="Serving") is None
    assert value(m, "tide_operator_training_jobs_total", **labels, outcome="failed") == 1


def test_metrics_server_serves_the_module_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(metrics.PORT_ENV, str(port))
    assert metrics.start_metrics_server(addr="127.0.0.1") == port
    metrics.record_decision("Promote", "Promoted", "llm", "chat")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"tide_operator_info", "tide_operator_decisions", "tide_operator_reconcile_duration_seconds"} <= names


def test_observe_status_sets_phase_and_speculation_from_the_written_status(m: OperatorMetrics) -> None:
    m.observe_status("llm", "chat", {"phase": "Canary", "speculation": {"enabled": False,
                                                                       "modelledSpeedupPercent": 93}})
    labels = {"tide_namespace": "llm", "tide_deployment": "chat"}
    assert value(m, "tide_operator_phase", **labels, phase="Canary") == 1
    assert value(m, "tide_operator_speculation_enabled", **labels) == 0
    assert value(m, "tide_operator_modelled_speedup_ratio", **labels) == pytest.approx(0.93)
    m.observe_status("llm", "fresh", {})
    assert value(m, "tide_operator_phase", tide_namespace="llm", tide_deployment="fresh", phase="Pending") is None


def test_serving_groups_have_desired_and_ready_series_that_go_with_the_group(m: OperatorMetrics) -> None:
    labels = {"tide_namespace": "llm", "tide_deployment": "chat"}
    m.observe_status("llm", "chat", {"servingGroups": [
        {"gpuClass": "H100", "deployment": "chat-vllm-h100", "replicas": 2, "replicasReady": 2},
        {"gpuClass": "MI250", "deployment": "chat-vllm-mi250", "replicas": 3, "replicasReady": 1}]})
    assert value(m, "tide_operator_serving_group_replicas", **labels, gpu_class="MI250", state="desired") == 3
    assert value(m, "tide_operator_serving_group_replicas", **labels, gpu_class="MI250", state="ready") == 1
    m.observe_status("llm", "chat", {"servingGroups": [
        {"gpuClass": "H100", "deployment": "chat-vllm-h100", "replicas": 5, "replicasReady": 4}]})
    assert value(m, "tide_operator_serving_group_replicas", **labels, gpu_class="H100", state="desired") == 5
    assert value(m, "tide_operator_serving_group_replicas", **labels, gpu_class="MI250", state="ready") is None
    m.forget("llm", "chat")
    assert value(m, "tide_operator_serving_group_replicas", **labels, gpu_class="H100", state="ready") is None


def test_reconcile_timer_records_failed_passes_too(m: OperatorMetrics) -> None:
    with pytest.raises(RuntimeError), m.reconcile_timer():
        raise RuntimeError("apiserver went away")
    assert value(m, "tide_operator_reconcile_duration_seconds_count") == 1
