"""The calibration sweep against a fake pod: timed concurrent completions, counter deltas, the switch."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tide_contracts import serving_control as sc
from tide_operator.adapters.calibration_sweep import SweepSettings, counter_total, run_sweep


class FakePod:
    """Completions that count drafts while speculation is on: 2 tokens per draft."""

    def __init__(self) -> None:
        self.speculation = sc.SpeculationState(enabled=True, runtime_control=True, num_speculative_tokens=3,
                                               tokens_per_batch_size=[(1, 8, 3)])
        self.drafts = 0.0
        self.switches: list[bool] = []

    # the control client's two calls
    def status(self) -> object:
        return type("Status", (), {"speculation": self.speculation})()

    def set_speculation(self, request: sc.SpeculationRequest) -> sc.SpeculationState:
        self.switches.append(request.enabled)
        self.speculation = self.speculation.model_copy(update={
            "enabled": request.enabled, "tokens_per_batch_size": request.tokens_per_batch_size})
        return self.speculation


@pytest.fixture
def pod() -> Iterator[tuple[FakePod, str]]:
    state = FakePod()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, body: str) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._send(json.dumps({"data": [{"id": "tiny"}]}))
            else:
                self._send(f'vllm:spec_decode_num_drafts_total{{engine="0"}} {state.drafts}\n'
                           f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {state.drafts}\n')

        def do_POST(self) -> None:
            tokens = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["max_tokens"]
            if state.speculation.enabled:
                state.drafts += tokens / 2
            self._send(json.dumps({"usage": {"completion_tokens": tokens}}))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_sweep_measures_both_modes_and_restores_the_switch(pod: tuple[FakePod, str]) -> None:
    state, url = pod
    table = state.speculation.tokens_per_batch_size
    sweep = run_sweep(url, state, SweepSettings(concurrencies=(1, 4), output_tokens=10, rounds=2))
    assert sweep.speculative_tokens == 3
    assert sweep.concurrencies() == [1, 4]
    on = sweep.at(4, True)
    assert on.output_tokens == 4 * 10  # one round: the fastest
    assert on.drafts == on.output_tokens / 2
    assert on.acceptance_length == 2.0
    assert sweep.at(4, False).drafts == 0
    assert state.speculation.enabled
    assert state.speculation.tokens_per_batch_size == table
    assert state.switches[-1] is True


def test_counters_sum_over_their_labels() -> None:
    text = 'x_total{engine="0"} 2.0\nx_total{engine="1"} 3.0\nx_totals 9\n# HELP x_total\n'
    assert counter_total(text, "x_total") == 5.0
    assert counter_total(text, "absent_total") == 0.0
