"""The simulated engine: requests step through verify steps whose acceptance comes from the scenario.

Accounting is by expectation, not by dice: a verify step of g drafted tokens at acceptance a adds
a^(i+1) to position i's accepted count and 1 + a + ... + a^g tokens to the output, so counters
converge on the scenario's numbers without sampling noise (optional seeded noise perturbs a per
request). The only clock is the step latency model; the batch size is what is running now: real
requests plus the scenario phase's background requests.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tide_vllm_sim.scenario import Phase, Scenario

# vLLM's buckets for vllm:e2e_request_latency_seconds (vllm/v1/metrics/loggers.py)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


def expected_length(a: float, g: int) -> float:
    """Tokens per verify step: the bonus token plus the expected accepted drafts."""
    return 1.0 + sum(a ** (i + 1) for i in range(g))


@dataclass
class SpecCounters:
    """vLLM's spec-decode counters as exact expectations (floored when exposed)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_per_position: list[float] = field(default_factory=list)

    def advance(self, steps: float, a: float, g: int) -> float:
        """Account `steps` verify steps; returns the tokens they produced."""
        if len(self.accepted_per_position) < g:
            self.accepted_per_position += [0.0] * (g - len(self.accepted_per_position))
        self.drafts += steps
        self.draft_tokens += steps * g
        for i in range(g):
            self.accepted_per_position[i] += steps * a ** (i + 1)
        return steps * expected_length(a, g)

    def exposed(self) -> tuple[int, int, int, list[int]]:
        """(drafts, draft tokens, accepted tokens, accepted per position) as vLLM's integer counters."""
        per_position = [math.floor(x) for x in self.accepted_per_position]
        return math.floor(self.drafts), math.floor(self.draft_tokens), sum(per_position), per_position


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float, n: int = 1) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, upper in enumerate(self.buckets):
            if value <= upper:
                self.counts[i] += n
        self.total += value * n
        self.count += n


@dataclass(frozen=True)
class FinishedRequest:
    """What capture needs to know about a request that finished."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    acceptance_rate: float | None  # vLLM's accepted / drafted of this request, None if not drafted
    draft_version: str | None


@dataclass
class EngineCounters:
    prompt_tokens: int = 0
    generation_tokens: float = 0.0
    success: dict[str, int] = field(default_factory=dict)  # finished_reason -> requests
    e2e_latency: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    spec: SpecCounters = field(default_factory=SpecCounters)


class SimEngine:
    """Thread-safe engine state; `complete` blocks for the simulated generation time."""

    def __init__(self, scenario: Scenario, *, num_speculative_tokens: int, draft_version: str | None,
                 max_num_seqs: int = 256, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.scenario = scenario
        self.num_speculative_tokens = num_speculative_tokens
        self.draft_version = draft_version
        self.speculation_enabled = draft_version is not None and num_speculative_tokens > 0
        self.bands: list[tuple[int, int, int]] | None = None  # tokens per batch-size band; None: always g
        self.max_num_seqs = max_num_seqs
        self.counters = EngineCounters()
        self.running_real = 0
        self.lock = threading.Lock()
        self._clock, self._sleep = clock, sleep
        self.started = clock()
        self._requests = 0
        self._background_progress = 0.0  # background requests finished, fractional
        self._last_tick = self.started
        self.on_finished: Callable[[FinishedRequest], None] = lambda r: None

    # ---- what the scenario says now
    def elapsed(self) -> float:
        return self._clock() - self.started

    def background_running(self) -> int:
        return self.scenario.phase_at(self.elapsed()).background_running

    def running_and_waiting(self) -> tuple[int, int]:
        wanted = self.running_real + self.background_running()
        return min(wanted, self.max_num_seqs), max(0, wanted - self.max_num_seqs)

    def speculative_tokens(self) -> int:
        """g of the next step: 0 while speculation is off or no draft is served; with bands, the band of
        the running batch (capped at the launch g, carried past the last band, as vLLM's lookup)."""
        if not (self.speculation_enabled and self.draft_version is not None):
            return 0
        if self.bands is None:
            return self.num_speculative_tokens
        batch = max(1, self.running_and_waiting()[0])
        k = next((k for start, end, k in self.bands if start <= batch <= end), None)
        if k is None:
            k = next((k for start, _, k in reversed(self.bands) if start <= batch), self.bands[0][2])
        return min(k, self.num_speculative_tokens)

    def step_seconds(self) -> float:
        m = self.scenario.engine
        batch = self.running_and_waiting()[0]
        return m.step_seconds * (1 + batch / m.batch_knee) * (1 + m.draft_cost * self.speculative_tokens())

    def acceptance(self, domain: str, request_number: int) -> float:
        a = self.scenario.acceptance_for(self.draft_version, domain)
        if self.scenario.noise and a > 0:
            rng = random.Random(f"{self.scenario.seed}:{request_number}")  # noqa: S311 - reproducible noise
            a *= 1 + self.scenario.noise * rng.gauss(0.0, 1.0)
        return min(max(a, 0.0), 1.0)

    # ---- a real request
    def complete(self, prompt_tokens: int, max_tokens: int, domain: str | None) -> tuple[str, int, float]:
        """Generate `max_tokens`; returns (request id, tokens, seconds)."""
        with self.lock:
            self._requests += 1
            number = self._requests
            self.running_real += 1
            self.counters.prompt_tokens += prompt_tokens
        request_id = f"cmpl-sim-{number}"
        a = self.acceptance(domain or self.scenario.domain_at(self.elapsed()), number)
        started, produced, drafted, accepted = self._clock(), 0.0, 0.0, 0.0
        try:
            while produced < max_tokens:
                with self.lock:
                    g, step = self.speculative_tokens(), self.step_seconds()
                    tokens = self.counters.spec.advance(1, a, g) if g else 1.0
                    tokens = min(tokens, max_tokens - produced)
                    self.counters.generation_tokens += tokens
                drafted, accepted = drafted + g, accepted + (expected_length(a, g) - 1 if g else 0)
                produced += tokens
                self._sleep(step)
        finally:
            with self.lock:
                self.running_real -= 1
        seconds = self._clock() - started
        with self.lock:
            self.counters.success["length"] = self.counters.success.get("length", 0) + 1
            self.counters.e2e_latency.observe(seconds)
        rate = accepted / drafted if drafted else None
        self.on_finished(FinishedRequest(request_id, prompt_tokens, max_tokens, rate, self.draft_version))
        return request_id, max_tokens, seconds

    # ---- background load (called every tick by the server's ticker thread)
    def tick(self) -> list[FinishedRequest]:
        """Advance the background requests over the time since the last tick, phase by phase."""
        now = self._clock()
        t0, t1, self._last_tick = self._last_tick - self.started, now - self.started, now
        bounds = [t0, *(p.at_s for p in self.scenario.timeline if t0 < p.at_s < t1), t1]
        finished: list[FinishedRequest] = []
        for start, end in itertools.pairwise(bounds):
            finished += self._background(self.scenario.phase_at(start), end - start)
        return finished

    def _background(self, phase: Phase, dt: float) -> list[FinishedRequest]:
        if phase.background_running == 0 or dt <= 0:
            return []
        m = self.scenario.engine
        a = self.scenario.acceptance_for(self.draft_version, phase.domain or self.scenario.default_domain)
        with self.lock:
            g, step = self.speculative_tokens(), self.step_seconds()
            steps = phase.background_running * dt / step
            tokens = self.counters.spec.advance(steps, a, g) if g else steps
            self.counters.generation_tokens += tokens
            before = math.floor(self._background_progress)
            self._background_progress += tokens / m.background_max_tokens
            finished = math.floor(self._background_progress) - before
            if finished:
                self.counters.prompt_tokens += finished * m.background_prompt_tokens
                self.counters.success["length"] = self.counters.success.get("length", 0) + finished
                self.counters.e2e_latency.observe(m.background_max_tokens / expected_length(a, g) * step, finished)
        rate = (expected_length(a, g) - 1) / g if g else None
        return [FinishedRequest(f"bg-{before + 1 + i}", m.background_prompt_tokens, m.background_max_tokens, rate,
                                self.draft_version) for i in range(finished)]
