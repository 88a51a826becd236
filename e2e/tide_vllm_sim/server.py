"""The simulator's HTTP server: vLLM's OpenAI routes, /metrics and the plugin's control routes.

    python -m tide_vllm_sim --model M --served-model-name chat --port 8000 \
        --speculative-config '{"method":"eagle3","num_speculative_tokens":3}' --sim-scenario s.yaml
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from tide_contracts import serving_control as sc
from tide_vllm_sim import control
from tide_vllm_sim.args import ServerArgs, parse_args
from tide_vllm_sim.capture import CaptureRecorder, CaptureSettings
from tide_vllm_sim.drafts import DraftLoadError, promoted_source, verify_draft
from tide_vllm_sim.engine import SimEngine
from tide_vllm_sim.metrics import render
from tide_vllm_sim.scenario import Scenario, load_scenario

DOMAIN_HEADER = "X-Tide-Domain"  # the traffic domain of one request (else the scenario's timeline)
DOMAIN_FIELD = "tide_domain"  # the same, as a request body field


def build_pod(args: ServerArgs) -> control.PodControl:
    scenario = load_scenario(args.scenario, args.seed)
    env = os.environ
    target_revision = env.get("TIDE_TARGET_REVISION") or "unknown"
    draft_version = (env.get("TIDE_DRAFT_VERSION") or "initial") if args.num_speculative_tokens else None
    engine = SimEngine(scenario, num_speculative_tokens=args.num_speculative_tokens, draft_version=draft_version,
                       max_num_seqs=args.max_num_seqs)
    launch_bands = (args.speculative_config or {}).get("num_speculative_tokens_per_batch_size")
    if launch_bands:  # vLLM's launch table (the operator rolls pods with one where they cannot switch live)
        engine.bands = [(int(a), int(b), int(k)) for a, b, k in launch_bands]
    capture = CaptureRecorder(CaptureSettings.from_env(), scenario.capture, scenario.seed, target_revision)
    engine.on_finished = capture.offer
    runtime_control = bool(args.speculative_config) and "SpeculationSwitch" in (args.scheduler_cls or "")
    launch = (args.speculative_config or {}).get("model")
    pod = control.PodControl(engine=engine, capture=capture, model_name=args.served_model_name,
                             target_revision=target_revision, runtime_control=runtime_control,
                             launch_source=str(launch) if launch else None, launch_version=draft_version or "initial")
    registry = env.get("TIDE_REGISTRY_URI")
    if registry and draft_version is not None:
        _load_promoted(pod, registry)
    return pod


def _load_promoted(pod: control.PodControl, registry: str) -> None:
    """Serve the promoted draft from the start, as the plugin does (a warning if it cannot)."""
    try:
        source, version, manifest_sha256 = promoted_source(registry)
        pod.engine.draft_version = verify_draft(source, version, pod.target_revision, manifest_sha256)
        pod.draft_source = source
    except DraftLoadError as err:
        pod.warnings.append(f"promoted draft not loaded, serving the launch draft: {err.message}")


def prompt_tokens(request: dict[str, Any]) -> int:
    """Whitespace words stand in for tokens (token id lists count as they are)."""
    prompt = request.get("prompt", "")
    if "messages" in request:
        prompt = " ".join(str(m.get("content", "")) for m in request["messages"] if isinstance(m, dict))
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return max(1, len(prompt))
    if isinstance(prompt, list):
        prompt = " ".join(map(str, prompt))
    return max(1, len(str(prompt).split()))


def complete(pod: control.PodControl, path: str, body: bytes, domain: str | None) -> tuple[int, dict[str, Any]]:
    """Answer an OpenAI (chat) completion after the simulated generation time."""
    try:
        request = json.loads(body or b"{}")
        max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
    except (ValueError, TypeError, AttributeError) as err:
        return 400, {"object": "error", "message": f"invalid request: {err}", "code": 400}
    n_prompt = prompt_tokens(request)
    request_id, tokens, _ = pod.engine.complete(n_prompt, max(1, max_tokens), domain or request.get(DOMAIN_FIELD))
    text = " tok" * tokens
    chat = path.endswith("chat/completions")
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
    return 200, {"id": request_id, "object": "chat.completion" if chat else "text_completion",
                 "model": pod.model_name, "choices": [choice],
                 "usage": {"prompt_tokens": n_prompt, "completion_tokens": tokens, "total_tokens": n_prompt + tokens}}


class InFlight:
    """Completions being answered, so a shutdown can wait for them (vLLM's drain mode)."""

    def __init__(self) -> None:
        self.count, self._idle = 0, threading.Condition()

    def __enter__(self) -> None:
        with self._idle:
            self.count += 1

    def __exit__(self, *_: object) -> None:
        with self._idle:
            self.count -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self.count and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
            return self.count == 0


def make_handler(pod: control.PodControl, in_flight: InFlight | None = None) -> type[BaseHTTPRequestHandler]:
    answering = in_flight or InFlight()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: bytes | str | dict[str, Any], content_type: str = "application/json") -> None:
            data = json.dumps(body).encode() if isinstance(body, dict) else body
            data = data.encode() if isinstance(data, str) else data
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b"")
            elif path == "/metrics":
                self._send(200, render(pod), "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": pod.model_name, "object": "model"}]})
            else:
                self._send(404, {"error": f"no route GET {path}"})

        def do_POST(self) -> None:
            path, body = self.path.split("?", 1)[0], self._body()
            if path in ("/v1/completions", "/v1/chat/completions"):
                with answering:
                    self._send(*complete(pod, path, body, self.headers.get(DOMAIN_HEADER)))
            else:
                self._send(404, {"error": f"no route POST {path}"})

    return Handler


def make_control_handler(pod: control.PodControl) -> type[BaseHTTPRequestHandler]:
    """The control port: the /tide/v1 routes and nothing else (the plugin's own server)."""
    base = make_handler(pod)

    class ControlHandler(base):  # type: ignore[valid-type,misc]
        def do_GET(self) -> None:
            self._route("GET", b"")

        def do_POST(self) -> None:
            self._route("POST", self._body())

        def _route(self, method: str, body: bytes) -> None:
            path = self.path.split("?", 1)[0]
            if control.is_control_route(path):
                self._send(*control.handle(pod, method, path, dict(self.headers), body))
            else:
                self._send(404, {"error": f"no route {method} {path} on the control port"})

    return ControlHandler


def control_port() -> int:
    raw = os.environ.get(sc.CONTROL_PORT_ENV, "")
    return int(raw) if raw else sc.DEFAULT_CONTROL_PORT


class ScenarioWatcher:
    """Re-reads the scenario file when it changes, so a test can shift every pod's traffic at once
    (a bad edit keeps the running scenario and says why on stderr)."""

    def __init__(self, path: str | None, seed: int | None) -> None:
        self.path, self.seed = path, seed
        self._stamp = self._mtime()

    def _mtime(self) -> int | None:
        try:
            return os.stat(self.path).st_mtime_ns if self.path else None
        except OSError:
            return None

    def changed(self) -> Scenario | None:
        stamp = self._mtime()
        if stamp is None or stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            return load_scenario(self.path, self.seed)
        except (OSError, ValueError, yaml.YAMLError) as err:  # pydantic's ValidationError is a ValueError
            print(f"tide_vllm_sim: scenario {self.path} not reloaded: {err}", file=sys.stderr, flush=True)
            return None


def run_ticker(pod: control.PodControl, stop: threading.Event, watcher: ScenarioWatcher | None = None) -> None:
    """Background load, capture flushes and scenario reloads, every tick."""
    while not stop.wait(pod.engine.scenario.engine.tick_seconds):
        reloaded = watcher.changed() if watcher is not None else None
        if reloaded is not None:
            with pod.engine.lock:
                pod.engine.scenario = reloaded
        for finished in pod.engine.tick():
            pod.capture.offer(finished)
        pod.capture.flush_if_due()


def serve(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    pod = build_pod(args)
    in_flight = InFlight()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(pod, in_flight))
    server.daemon_threads = True
    draining = threading.Event()
    if args.shutdown_timeout > 0:  # as vLLM: drain on SIGTERM; without the flag SIGTERM ends it at once
        def drain(*_: object) -> None:
            draining.set()
            threading.Thread(target=server.shutdown, daemon=True).start()  # waits for serve_forever: not here
        signal.signal(signal.SIGTERM, drain)
    if control_port() == args.port:
        raise SystemExit(f"{sc.CONTROL_PORT_ENV}={args.port} is the API port: the control routes need their own")
    controls = ThreadingHTTPServer((args.host, control_port()), make_control_handler(pod))
    controls.daemon_threads = True
    threading.Thread(target=controls.serve_forever, daemon=True, name="sim-control").start()
    stop = threading.Event()
    watcher = ScenarioWatcher(args.scenario, args.seed)
    threading.Thread(target=run_ticker, args=(pod, stop, watcher), daemon=True, name="sim-ticker").start()
    print(f"tide_vllm_sim serving {pod.model_name} on {args.host}:{args.port} (control :{control_port()}) "
          f"(draft {pod.engine.draft_version}, warnings {pod.warnings})", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.socket.close()  # no new connection from here: a late request is refused, not left queued
        if draining.is_set() and not in_flight.wait_idle(args.shutdown_timeout):
            print(f"tide_vllm_sim: {in_flight.count} request(s) aborted after {args.shutdown_timeout}s",
                  file=sys.stderr, flush=True)
        stop.set()
        pod.capture.flush()
