"""Shared constants of the simulator's unit tests (imported by conftest and the tests)."""

from __future__ import annotations

from http.server import ThreadingHTTPServer

from tide_vllm_sim.control import PodControl

TOKEN = "sim-test-token"
SPEC = '{"method":"eagle3","model":"d","num_speculative_tokens":3}'
SCHEDULER = "tide_serving.scheduler.SpeculationSwitchScheduler"
SCENARIO = {
    "seed": 11,
    "default_domain": "general",
    "acceptance": {"initial": {"general": 0.8, "korean": 0.3}, "v2": {"general": 0.78, "korean": 0.7}},
    "engine": {"step_seconds": 0.001, "tick_seconds": 0.05},
    "capture": {"hidden_size": 8, "vocab_size": 50, "max_rows_per_request": 12},
}


class RunningSim:
    def __init__(self, pod: PodControl, server: ThreadingHTTPServer, controls: ThreadingHTTPServer) -> None:
        self.pod, self.server, self.controls = pod, server, controls
        host, port = server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self.control_url = "http://{}:{}".format(*controls.server_address[:2])
