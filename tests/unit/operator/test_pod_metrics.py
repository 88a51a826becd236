"""Requests in flight from a vLLM pod's own /metrics page (the lent pods' drain)."""

from __future__ import annotations

from tide_operator.adapters.pod_metrics import in_flight, requests_in_flight

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="chat"} 3.0
vllm:num_requests_running{engine="1",model_name="chat"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="chat"} 2.0
vllm:num_requests_running_total{engine="0"} 99.0
"""


def test_running_and_waiting_add_up_over_engines() -> None:
    assert in_flight(PAGE) == 6  # a longer name that starts the same is another metric


def test_a_page_without_the_gauges_is_unknown_not_idle() -> None:
    assert in_flight("# nothing here\nother_metric 1\n") is None
    assert in_flight("vllm:num_requests_running{engine=\"0\"} 0\n") == 0


def test_an_unreachable_pod_is_unknown() -> None:
    assert requests_in_flight("", 8000) is None
    assert requests_in_flight("127.0.0.1", 9, timeout_s=0.5) is None  # discard port: nothing listens
