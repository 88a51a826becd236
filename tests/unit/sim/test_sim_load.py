"""The load generator: bounded, loopback only, and it drives the simulator's batch."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from tide_vllm_sim.load import LoadSpec, main, run_load


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"url": "http://10.0.0.1:8000"}, "loopback"),
    ({"url": "http://example.com"}, "loopback"),
    ({"rps": 0}, "--rps"),
    ({"duration_s": 601}, "--duration"),
    ({"max_requests": 10**6}, "--max-requests"),
    ({"concurrency": 1000}, "--concurrency"),
])
def test_limits_are_enforced(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoadSpec(**{"url": "http://127.0.0.1:8000", **kwargs})


def test_load_runs_at_the_rate_for_the_duration(start_sim: Any) -> None:
    sim = start_sim()
    result = run_load(LoadSpec(url=sim.url, domain="korean", rps=40, duration_s=0.5, max_tokens=8))
    assert result.sent == 20
    assert (result.succeeded, result.failed) == (20, 0)
    assert result.completion_tokens == 160
    assert sim.pod.engine.counters.success["length"] == 20


def test_request_budget_stops_the_load_early(start_sim: Any) -> None:
    sim = start_sim()
    assert run_load(LoadSpec(url=sim.url, rps=100, duration_s=5, max_requests=7, max_tokens=2)).sent == 7


def test_cli_prints_a_json_summary(start_sim: Any, capsys: pytest.CaptureFixture[str]) -> None:
    sim = start_sim()
    assert main(["--url", sim.url, "--rps", "20", "--duration", "0.2", "--max-tokens", "3"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["sent"] == summary["succeeded"] == 4
    with urllib.request.urlopen(sim.url + "/health", timeout=5) as response:
        assert response.status == 200


def test_cli_refuses_a_remote_url(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--url", "http://192.0.2.1:8000"])
    assert "loopback" in capsys.readouterr().err
