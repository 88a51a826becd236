"""Measure a serving pod from outside: a concurrency sweep with speculation off and on.

The pod's OpenAI API serves the load (b concurrent completions of a fixed length, ignore_eos, greedy),
its /metrics gives vLLM's own spec-decode counters, and the plugin's speculation switch
(POST /tide/v1/speculation, bearer token) turns speculation off and on without a restart. The
numbers go to control/calibration.py. Run it on an otherwise idle pod: other traffic is measured too.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tide_contracts import serving_control as sc
from tide_operator.control.calibration import Sweep, SweepPoint

DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16)
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total")


@dataclass(frozen=True)
class SweepSettings:
    concurrencies: Sequence[int] = DEFAULT_CONCURRENCIES
    output_tokens: int = 64  # per request; long enough that prefill is a small share of the time
    rounds: int = 3  # rounds per point and mode, alternating off/on; the fastest counts (more: less noise)
    prompts: Sequence[str] = ("Describe the sea in one long paragraph.",)
    timeout_s: float = 300.0


def counter_total(metrics: str, name: str) -> float:
    """Sum of one counter's samples over its labels (0 when the engine has not exported it)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rpartition(" ")[2])
    return total


def _get(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return resp.read().decode()


def served_model(base_url: str, timeout_s: float = 30.0) -> str:
    return json.loads(_get(base_url.rstrip("/") + "/v1/models", timeout_s))["data"][0]["id"]


def _complete(base_url: str, model: str, prompt: str, tokens: int, timeout_s: float) -> int:
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return int(json.loads(resp.read())["usage"]["completion_tokens"])


def _concurrent(calls: Sequence[Callable[[], int]]) -> int:
    """Run every call at once on its own thread; the sum of their results (re-raises the first error)."""
    results: list[int | BaseException] = [0] * len(calls)

    def one(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as err:  # noqa: BLE001 - re-raised below
            results[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return sum(results)  # type: ignore[arg-type]


def measure_round(
    base_url: str, model: str, concurrency: int, speculation: bool, settings: SweepSettings, round_no: int = 0
) -> SweepPoint:
    """One round of ``concurrency`` simultaneous completions, timed, with the counters' deltas."""
    metrics_url = base_url.rstrip("/") + "/metrics"
    prompts = [settings.prompts[(round_no + i) % len(settings.prompts)] for i in range(concurrency)]
    calls = [lambda p=p: _complete(base_url, model, p, settings.output_tokens, settings.timeout_s) for p in prompts]
    before = _get(metrics_url, settings.timeout_s)
    start = time.perf_counter()
    tokens = _concurrent(calls)
    elapsed = time.perf_counter() - start
    after = _get(metrics_url, settings.timeout_s)
    drafts, drafted, accepted = (counter_total(after, n) - counter_total(before, n) for n in SPEC_COUNTERS)
    return SweepPoint(concurrency, speculation, tokens, elapsed, drafts, drafted, accepted)


def _fastest(rounds: Sequence[SweepPoint]) -> SweepPoint:
    """The round that decoded fastest: load from elsewhere only ever adds time (timeit's rule)."""
    return max(rounds, key=lambda r: r.throughput)


def _measure_pair(base_url: str, model: str, control: sc.ServingControlClient, concurrency: int,
                  settings: SweepSettings) -> list[SweepPoint]:
    """Off and on, round by round in alternating order, so load from elsewhere falls on both alike."""
    rounds: dict[bool, list[SweepPoint]] = {False: [], True: []}
    for r in range(settings.rounds):
        for enabled in ((False, True) if r % 2 == 0 else (True, False)):
            control.set_speculation(sc.SpeculationRequest(enabled=enabled))
            rounds[enabled].append(measure_round(base_url, model, concurrency, enabled, settings, r))
    return [_fastest(rounds[False]), _fastest(rounds[True])]


def run_sweep(base_url: str, control: sc.ServingControlClient, settings: SweepSettings) -> Sweep:
    """Off and on at every concurrency, then speculation as it was before the sweep."""
    model = served_model(base_url)
    was = control.status().speculation
    warm = SweepSettings(concurrencies=(), output_tokens=8, prompts=settings.prompts, timeout_s=settings.timeout_s)
    points = []
    try:
        for enabled in (False, True):  # warm both paths before timing anything
            control.set_speculation(sc.SpeculationRequest(enabled=enabled))
            measure_round(base_url, model, max(settings.concurrencies), enabled, warm)
        for b in settings.concurrencies:
            points += _measure_pair(base_url, model, control, b, settings)
    finally:
        restore = sc.SpeculationRequest(enabled=was.enabled, tokens_per_batch_size=was.tokens_per_batch_size)
        control.set_speculation(restore)
    return Sweep(tuple(points), was.num_speculative_tokens)
