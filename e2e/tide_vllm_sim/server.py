"""The stand-in server: /health, /v1/models, /v1/completions and /metrics in vLLM's names."""

from __future__ import annotations

import argparse
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class EngineState:
    served_model_name: str
    speculative_config: dict[str, Any] | None
    generation_tokens: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def complete(self, max_tokens: int) -> None:
        with self.lock:
            self.requests += 1
            self.generation_tokens += max_tokens

    def metrics(self) -> str:
        labels = f'model_name="{self.served_model_name}",engine="0"'
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} 0",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{labels}}} 0",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {self.generation_tokens}",
        ]
        if self.speculative_config:
            for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
                metric = f"vllm:spec_decode_{name}_total"
                lines += [f"# TYPE {metric} counter", f"{metric}{{{labels}}} 0"]
        return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """vLLM's own flags that matter here; every other flag is accepted and ignored, as a real server would use it."""
    parser = argparse.ArgumentParser(prog="vllm-standin")
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--speculative-config", "-sc", default=None)
    args, _unknown = parser.parse_known_args(argv)
    return args


def make_handler(state: EngineState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: str, content_type: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, "")
            elif self.path == "/metrics":
                self._send(200, state.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": state.served_model_name}]}))
            else:
                self._send(404, json.dumps({"error": "not found"}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions":
                self._send(404, json.dumps({"error": "not found"}))
                return
            max_tokens = int(request.get("max_tokens", 16))
            state.complete(max_tokens)
            self._send(200, json.dumps({"object": "text_completion", "model": state.served_model_name,
                                        "choices": [{"index": 0, "text": " x" * max_tokens, "finish_reason": "length"}],
                                        "usage": {"completion_tokens": max_tokens}}))

    return Handler


def serve(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spec = json.loads(args.speculative_config) if args.speculative_config else None
    state = EngineState(served_model_name=args.served_model_name or args.model, speculative_config=spec)
    ThreadingHTTPServer((args.host, args.port), make_handler(state)).serve_forever()
