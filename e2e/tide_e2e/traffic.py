"""Live traffic for the whole-loop runs: OpenAI completions against every serving pod, one domain at a time.

Prompts are token-id windows cut from a domain's held-out text (tiny_target.capture.domain_prompts),
sent as token ids to `/v1/completions` with temperature sampling, a few requests in flight per pod.
The domain can be switched while it runs (the workload shift). Every request's outcome is counted:
a hot swap must not fail any, so a failure keeps its reason.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TrafficStats:
    ok: Counter[str] = field(default_factory=Counter)  # per domain
    failed: list[str] = field(default_factory=list)  # "<pod url>: <reason>"
    generated_tokens: int = 0

    @property
    def total_ok(self) -> int:
        return sum(self.ok.values())


@dataclass(frozen=True)
class TrafficSettings:
    model: str
    max_tokens: int = 96
    temperature: float = 0.7
    in_flight_per_pod: int = 2
    timeout_s: float = 300.0


class Traffic:
    """Closed-loop clients: `in_flight_per_pod` workers per pod URL, each sending one request at a time."""

    def __init__(self, prompts: dict[str, list[list[int]]], settings: TrafficSettings,
                 pod_urls: Callable[[], list[str]]) -> None:
        self.settings, self._pod_urls = settings, pod_urls
        self._prompts = {d: itertools.cycle(p) for d, p in prompts.items()}
        self.domain = next(iter(prompts))
        self.stats = TrafficStats()
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._workers: dict[tuple[str, int], threading.Thread] = {}
        self._watcher = threading.Thread(target=self._watch, name="traffic-watch", daemon=True)

    def start(self) -> Traffic:
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._watcher.join(timeout=5)
        for worker in self._workers.values():
            worker.join(timeout=self.settings.timeout_s)

    def switch(self, domain: str) -> None:
        if domain not in self._prompts:
            raise ValueError(f"unknown traffic domain {domain!r}")
        self.domain = domain

    def _watch(self) -> None:
        # Pods appear (and could be replaced): give each pod URL its workers as soon as it is Ready.
        while not self._stop.is_set():
            for url in self._pod_urls():
                for slot in range(self.settings.in_flight_per_pod):
                    if (url, slot) not in self._workers:
                        worker = threading.Thread(target=self._work, args=(url,), daemon=True,
                                                  name=f"traffic-{url}-{slot}")
                        self._workers[url, slot] = worker
                        worker.start()
            self._stop.wait(1.0)

    def _work(self, url: str) -> None:
        while not self._stop.is_set():
            domain = self.domain
            with self._lock:
                prompt = next(self._prompts[domain])
            try:
                tokens = self._complete(url, prompt)
            except (OSError, ValueError) as err:  # URLError/HTTPError are OSErrors
                with self._lock:
                    self.stats.failed.append(f"{url}: {_reason(err)}")
                self._stop.wait(1.0)
                continue
            with self._lock:
                self.stats.ok[domain] += 1
                self.stats.generated_tokens += tokens

    def _complete(self, url: str, prompt: list[int]) -> int:
        s = self.settings
        body = {"model": s.model, "prompt": prompt, "max_tokens": s.max_tokens, "temperature": s.temperature,
                "ignore_eos": True}
        request = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=s.timeout_s) as response:
            answer = json.loads(response.read())
        return int(answer["usage"]["completion_tokens"])


def _reason(err: Exception) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code}: {err.read()[:200]!r}"
    return f"{type(err).__name__}: {err}"


def wait_requests(traffic: Traffic, domain: str, count: int, timeout_s: float) -> None:
    """Block until `count` requests of `domain` have been answered."""
    deadline = time.monotonic() + timeout_s
    while traffic.stats.ok[domain] < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{traffic.stats.ok[domain]}/{count} {domain} requests answered in {timeout_s:.0f}s; "
                               f"failures: {traffic.stats.failed[-3:]}")
        time.sleep(0.5)
