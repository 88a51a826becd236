"""One control pass's pod calls with one hung pod: wall time of a status read and a capture switch.

    .venv/bin/python bench/pod_calls.py [--pods 20] [--latency-ms 50] [--check]

Each pod is the serving control API on loopback (127.0.0.<i>, one HTTP server per pod, answering after
--latency-ms); one pod accepts the connection and never answers, as a wedged engine does. The operator's
own Fleet calls them through the real ServingControlClient (urllib, socket timeouts). Run against a
checkout whose Fleet calls pods one by one (30 s client timeout), the hung pod alone costs 30 s per
fan-out; with podCalls (default: 8 at once, status 5 s, switches 15 s) a fan-out costs about one
deadline. --check exits 1 when the status read takes longer than its deadline plus one second.
"""

from __future__ import annotations

import argparse
import inspect
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tide_contracts.serving_control import STATUS_ROUTE
from tide_operator.adapters.fleet import Fleet, ServingPod

PORT = 18081
STATUS = {"contract_version": 1, "plugin_version": "0.1", "vllm_version": "0.32.0", "engine_supported": True,
          "model_name": "chat", "draft": None,
          "speculation": {"enabled": False, "runtime_control": True, "num_speculative_tokens": 3},
          "capture": {"enabled": False, "sampling_rate": 0.1, "destination": None, "counters": {}}}


def serve_pod(ip: str, latency_s: float) -> ThreadingHTTPServer:
    class Pod(BaseHTTPRequestHandler):
        def _answer(self, body: dict[str, Any]) -> None:
            time.sleep(latency_s)
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer(STATUS if self.path == STATUS_ROUTE else {})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(STATUS["capture"])

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer((ip, PORT), Pod)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def hung_pod(ip: str) -> socket.socket:
    """Accepts connections (the kernel's backlog) and never reads or answers."""
    sock = socket.socket()
    sock.bind((ip, PORT))
    sock.listen(64)
    return sock


def timed(what: str, call: Any) -> float:
    started = time.monotonic()
    try:
        call()
        outcome = "ok"
    except Exception as e:  # noqa: BLE001 -- the bench reports what the pass would
        outcome = str(e)[:110]
    elapsed = time.monotonic() - started
    print(f"{what:<16} {elapsed:7.2f} s   {outcome}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    ips = [f"127.0.0.{i}" for i in range(2, args.pods + 2)]
    servers = [serve_pod(ip, args.latency_ms / 1000) for ip in ips[:-1]]
    hung = hung_pod(ips[-1])
    pods = [ServingPod(f"chat-vllm-{i:02}", ip, True) for i, ip in enumerate(ips)]
    parallel = "calls" in inspect.signature(Fleet).parameters
    fleet = Fleet(pods, PORT, "token")
    print(f"{args.pods} pods, {args.latency_ms:g} ms each, 1 hung; Fleet: "
          + (f"parallel {fleet.calls.parallelism}, deadlines status {fleet.calls.status_deadline_seconds:g} s, "
             f"switch {fleet.calls.switch_deadline_seconds:g} s" if parallel else "one by one, 30 s timeout"))
    status_s = timed("status read", lambda: print(f"{'':16} answered: "
                                                  f"{sum(s is not None for s in fleet.statuses().values())}"))
    timed("capture switch", lambda: fleet.set_capture(True, 0.1, None))
    for server in servers:
        server.shutdown()
    hung.close()
    deadline = fleet.calls.status_deadline_seconds if parallel else 30.0
    return 1 if args.check and status_s > deadline + 1 else 0


if __name__ == "__main__":
    sys.exit(main())
