"""Serving plugin cost on the real engine: tokens/s with capture off vs on, and the pause a hot swap costs.

    VENV=$(hack/vllm-env.sh) && $VENV/bin/python bench/serving_capture.py [--rounds 6] [--json out.json]

One vLLM CPU server (tiny bigram Llama + EAGLE-3 draft, the plugin loaded), a loopback S3 (moto).
Arms run interleaved, in a rotating order, within each round (two shared cores are noisy): capture
off, capture on at the default sampling rate, capture on for every request. Each arm serves the
same fixed workload (concurrent greedy completions); throughput = completion tokens / wall time.
Because the shared cores make tokens/s noisy, the report also gives the engine-loop share spent
in capture (the plugin's own timer around its tap: the serving overhead it adds to every step),
which does not depend on what else runs on the machine. Then draft swaps (good <-> random) under
load report the generation pause each cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from tide_contracts import serving_control as sc
from tide_serving.testing.loopback_s3 import loopback_s3
from tide_serving.testing.server import ServerConfig, complete, start_server
from tide_serving.testing.tiny_models import build_tiny_models, publish_draft

TOKEN = "bench-token"


def workload(server, round_no: int, clients: int, requests: int, max_tokens: int) -> tuple[int, float]:
    """(completion tokens, wall seconds) for `requests` requests over `clients` threads."""
    done: list[int] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for i in range(c, requests, clients):
            prompt = f"w{3 + (round_no * 37 + i) % 500} w{3 + (i * 11) % 500} w{3 + (i * 29 + c) % 500}"
            n = complete(server, prompt, max_tokens)["usage"]["completion_tokens"]
            with lock:
                done.append(n)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), time.perf_counter() - start


def capture_arms(ctl: sc.ServingControlClient, destination: str) -> dict[str, sc.CaptureRequest]:
    return {"off": sc.CaptureRequest(enabled=False),
            f"on@{sc.DEFAULT_SAMPLING_RATE}": sc.CaptureRequest(enabled=True, sampling_rate=sc.DEFAULT_SAMPLING_RATE,
                                                                destination=destination),
            "on@1.0": sc.CaptureRequest(enabled=True, sampling_rate=1.0, destination=destination)}


def measure_capture(server, ctl, destination: str,
                    args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per arm: tokens/s of every round, and the engine-loop share spent in capture (all rounds)."""
    arms = capture_arms(ctl, destination)
    names = list(arms)
    rates: dict[str, list[float]] = {n: [] for n in names}
    engine_s = dict.fromkeys(names, 0.0)
    wall_s = dict.fromkeys(names, 0.0)
    for w in range(2):  # warm-up: first requests pay one-off compilation and allocation costs
        workload(server, 900 + w, args.clients, args.requests, args.max_tokens)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            before = ctl.set_capture(arms[name]).counters.engine_seconds
            tokens, wall = workload(server, r, args.clients, args.requests, args.max_tokens)
            rates[name].append(tokens / wall)
            after = ctl.set_capture(sc.CaptureRequest(enabled=False)).counters.engine_seconds  # flushes
            engine_s[name] += after - before
            wall_s[name] += wall
        print(f"round {r + 1}: " + ", ".join(f"{n} {rates[n][-1]:.1f} tok/s" for n in names), flush=True)
    return rates, {n: engine_s[n] / wall_s[n] for n in names}


def measure_swaps(server, ctl, drafts: list[Path], args: argparse.Namespace) -> list[dict[str, float]]:
    stop = threading.Event()

    def load() -> None:
        r = 0  # keeps two requests in flight while the swaps happen
        while not stop.is_set():
            workload(server, 500 + r, 2, 2, args.max_tokens)
            r += 1

    loader = threading.Thread(target=load)
    loader.start()
    swaps = []
    try:
        time.sleep(1.0)
        for i in range(args.swaps):
            start = time.perf_counter()
            result = ctl.load_draft(sc.DraftLoadRequest(source=str(drafts[i % len(drafts)])))
            swaps.append({"pause_s": result.pause_seconds, "verify_s": result.verify_seconds,
                          "route_s": time.perf_counter() - start})
            time.sleep(0.5)
    finally:
        stop.set()
        loader.join()
    return swaps


def summarize(rates: dict[str, list[float]], engine_share: dict[str, float],
              swaps: list[dict[str, float]]) -> dict[str, object]:
    med = {n: statistics.median(v) for n, v in rates.items()}
    base = med["off"]
    return {
        "tokens_per_s_median": med,
        "tokens_per_s_all": rates,
        "ratio_vs_off": {n: m / base for n, m in med.items()},
        "relative_spread": {n: (max(v) - min(v)) / statistics.median(v) for n, v in rates.items()},
        "capture_engine_share": engine_share,
        "swap_pause_s": {"median": statistics.median(s["pause_s"] for s in swaps),
                         "max": max(s["pause_s"] for s in swaps)},
        "swap_route_s_median": statistics.median(s["route_s"] for s in swaps),
        "swaps": swaps,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--swaps", type=int, default=6)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tide-bench-serving-"))
    models = build_tiny_models()
    drafts = [publish_draft(models.random_draft, work / "reg" / "v1", version="v1"),
              publish_draft(models.good_draft, work / "reg" / "v2", version="v2")]
    with loopback_s3(work / "moto.log"):
        import boto3

        boto3.client("s3").create_bucket(Bucket="bench")
        env = {sc.CONTROL_TOKEN_ENV: TOKEN, "TIDE_STATE_DIR": str(work / "state"),
               "TIDE_TARGET_REVISION": "tiny-bigram-1", "TIDE_CAPTURE_FLUSH_S": "2",
               # Pinned prefixes: captures under the bench bucket, drafts from the local registry.
               "TIDE_CAPTURE_URI": "s3://bench/captures", "TIDE_LOCAL_DRAFTS_DIR": str(work / "reg")}
        server = start_server(ServerConfig(target=models.target, draft=models.good_draft,
                                           log_path=work / "server.log", env=env))
        try:
            ctl = sc.ServingControlClient(server.control_url, TOKEN, timeout_s=300)
            rates, engine_share = measure_capture(server, ctl, "s3://bench/captures", args)
            counters = ctl.status().capture.counters
            swaps = measure_swaps(server, ctl, drafts, args)
        finally:
            server.stop()
    report = summarize(rates, engine_share, swaps) | {"capture_counters": counters.model_dump(), "args": vars(args) | {
        "json": str(args.json) if args.json else None}}
    print(json.dumps({k: report[k] for k in ("tokens_per_s_median", "ratio_vs_off", "relative_spread",
                                             "capture_engine_share", "swap_pause_s", "swap_route_s_median",
                                             "capture_counters")}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
