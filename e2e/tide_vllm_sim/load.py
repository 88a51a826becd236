"""A small open-loop load generator for the simulator (or any vLLM server on loopback).

    python -m tide_vllm_sim.load --url http://127.0.0.1:8000 --domain korean --rps 20 --duration 10

Requests start at a fixed rate (not when the previous one returns), so the server's running
requests follow Little's law: rps x latency. Bounded in time, count and concurrency, and refuses
any host outside 127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from urllib.parse import urlparse

MAX_DURATION_S = 600.0
MAX_REQUESTS = 100_000
MAX_CONCURRENCY = 256


@dataclass(frozen=True)
class LoadSpec:
    url: str
    domain: str | None = None
    rps: float = 10.0
    duration_s: float = 10.0
    max_tokens: int = 32
    max_requests: int = 1000
    concurrency: int = 64
    model: str | None = None
    prompt: str = "tell me about speculative decoding"

    def __post_init__(self) -> None:
        host = urlparse(self.url).hostname or ""
        if host != "localhost" and not _is_loopback(host):
            raise ValueError(f"--url {self.url}: the load generator only targets loopback hosts")
        if not 0 < self.rps <= 1000:
            raise ValueError(f"--rps {self.rps}: must be in (0, 1000]")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"--duration {self.duration_s}: must be in (0, {MAX_DURATION_S:g}] seconds")
        if not 0 < self.max_requests <= MAX_REQUESTS:
            raise ValueError(f"--max-requests {self.max_requests}: must be in (0, {MAX_REQUESTS}]")
        if not 0 < self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"--concurrency {self.concurrency}: must be in (0, {MAX_CONCURRENCY}]")


@dataclass(frozen=True)
class LoadResult:
    sent: int
    succeeded: int
    failed: int
    completion_tokens: int
    mean_latency_s: float | None
    wall_s: float


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _one_request(spec: LoadSpec) -> tuple[bool, int, float]:
    body = {"prompt": spec.prompt, "max_tokens": spec.max_tokens, **({"model": spec.model} if spec.model else {})}
    headers = {"Content-Type": "application/json", **({"X-Tide-Domain": spec.domain} if spec.domain else {})}
    request = urllib.request.Request(spec.url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        return True, int(answer.get("usage", {}).get("completion_tokens", 0)), time.monotonic() - started
    except (urllib.error.URLError, OSError, ValueError):
        return False, 0, time.monotonic() - started


def run_load(spec: LoadSpec, stop: threading.Event | None = None) -> LoadResult:
    """Send requests at spec.rps until the duration or the request budget is spent (or `stop` is set);
    wait for those in flight."""
    stop = stop or threading.Event()
    results: list[tuple[bool, int, float]] = []
    lock = threading.Lock()
    slots = threading.BoundedSemaphore(spec.concurrency)

    def send() -> None:
        try:
            outcome = _one_request(spec)
            with lock:
                results.append(outcome)
        finally:
            slots.release()

    started, sent = time.monotonic(), 0
    with ThreadPoolExecutor(max_workers=spec.concurrency) as pool:
        while sent < spec.max_requests:
            offset = sent / spec.rps
            if offset >= spec.duration_s:
                break
            if stop.wait(max(0.0, started + offset - time.monotonic())):
                break
            slots.acquire()  # at most `concurrency` in flight: a stuck server cannot pile threads up
            pool.submit(send)
            sent += 1
    ok = [r for r in results if r[0]]
    return LoadResult(sent=sent, succeeded=len(ok), failed=len(results) - len(ok),
                      completion_tokens=sum(r[1] for r in ok),
                      mean_latency_s=sum(r[2] for r in ok) / len(ok) if ok else None,
                      wall_s=time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tide_vllm_sim.load", description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--domain", default=None, help="traffic domain (X-Tide-Domain header)")
    parser.add_argument("--rps", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--model", default=None)
    args = parser.parse_args(argv)
    try:
        spec = LoadSpec(url=args.url, domain=args.domain, rps=args.rps, duration_s=args.duration,
                        max_tokens=args.max_tokens, max_requests=args.max_requests,
                        concurrency=args.concurrency, model=args.model)
    except ValueError as err:
        parser.error(str(err))
    result = run_load(spec)
    print(json.dumps(asdict(result)))
    return 0 if result.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
