from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from sim_harness import SCENARIO, SCHEDULER, SPEC, TOKEN, RunningSim

from tide_vllm_sim.args import parse_args
from tide_vllm_sim.server import build_pod, make_control_handler, make_handler


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


@pytest.fixture
def start_sim(scenario_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., RunningSim]]:
    """Start the simulator's HTTP server in this process on a loopback port."""
    servers: list[ThreadingHTTPServer] = []
    monkeypatch.setenv("TIDE_CONTROL_TOKEN", TOKEN)
    monkeypatch.setenv("TIDE_TARGET_REVISION", "rev-1")
    monkeypatch.setenv("TIDE_POD_NAME", "sim-0")
    # Pinned sources and destinations: the tests' draft directories and these buckets' prefixes.
    monkeypatch.setenv("TIDE_LOCAL_DRAFTS_DIR", str(scenario_file.parents[1]))
    monkeypatch.setenv("TIDE_REGISTRY_URI", "s3://tide")

    def start(*extra: str, speculative: bool = True) -> RunningSim:
        argv = ["--model", "tiny", "--served-model-name", "chat", "--host", "127.0.0.1", "--port", "0",
                "--sim-scenario", str(scenario_file)]
        if speculative:
            argv += ["--speculative-config", SPEC, "--scheduler-cls", SCHEDULER]
        argv += extra  # last wins, as in argparse
        pod = build_pod(parse_args(argv))
        both = [ThreadingHTTPServer(("127.0.0.1", 0), handler(pod)) for handler in (make_handler, make_control_handler)]
        for server in both:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.extend(both)
        return RunningSim(pod, *both)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


