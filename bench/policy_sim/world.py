"""The world every policy runs in: true acceptance per draft and domain, costs, training, Prometheus' view.

What it can punish, and why the numbers:
- Regression: a trained candidate's live acceptance can be below its evaluation (with the scenario's
  probability, by 0.04-0.12 per token on the domains it trained on): the held-out split is drawn from
  the buffer, live traffic is not.
- Forgetting: a round loses a share (0.1-0.35) of what the untrained domains had gained over an untrained
  draft, the launch draft's home domain included (generator._untrained; TIDE §VI leaves catastrophic
  forgetting under recurring workloads unevaluated).
- Capture costs 2% of serving throughput while on: TIDE copies accepted tokens' hidden states device to
  host and flushes them (about 100 MiB/s per instance for gpt-oss-120b, tide-paper.md §4) and claims
  "no overhead" without measuring it; 2% is a pessimistic stand-in until bench/serving_capture.py's
  engine share is measured on a GPU. A trainer Job costs 1% while it runs: it trains on the training
  pool (other GPUs), so only its reads of the buffer share the serving pods' storage and network.
- True draft and verify costs are 5% above the operator's profile (TIDE: its model within 9%).
- Capture signatures (tide_contracts.signature, the operator's return detection, issue 16): each domain's
  rows are a unit Gaussian per dimension around its own direction, two domains 0.08 apart (symmetric KL
  per dimension), as code and prose are on the tiny target (docs/draft-pool.md); a shard's signature is
  exactly the mixture of its weights' domains, and a trained draft keeps its window's.
Noise is paired: every policy of a scenario reads the same noise at the same scrape, tick or step
(arrays indexed by time and by the tick a run was launched at), not in the order it happens to ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.policy_sim.generator import STEP_S, TICK_S, Scenario
from tide_contracts.draft_pool import DomainSignature
from tide_contracts.registry import CaptureObject
from tide_contracts.signature import PROJECTION, SIGNATURE_DIMENSIONS
from tide_operator.config import OperatorConfig, TrainerConfig
from tide_operator.control.cost_model import DEFAULT_PROFILE, expected_acceptance_length, tokens_for_batch_size
from tide_operator.control.lifecycle import CaptureParams
from tide_operator.control.retention import claim_window

Bands = tuple[tuple[int, int, int], ...]
Entry = tuple[float, float, tuple[float, ...]]  # a capture shard: (written at, samples, domain weights)
G = 3  # spec.draft.numSpeculativeTokens (TIDE's gamma)
REPLICAS = 4
MAX_BATCH_SIZE = 512
MAX_BUFFER_SAMPLES = 4096  # spec.control.capture.maxBufferSamples: the trainer's window is the newest
SAMPLE_THRESHOLD = 2048
WINDOW_SHARDS = TrainerConfig().window_shards  # operator config trainer.windowShards: one run's claim
RETENTION_S = CaptureParams().retention_s  # spec.control.capture.retention
SCRAPE_S = 15.0  # Prometheus: values as of the last scrape
RATE_WINDOW_S = OperatorConfig().prometheus_window_seconds  # the operator's queries: increase(...[60s])
# Relative sd of one query's ratio over the operator's window (about 3% per group, issue 15). A window
# averages one innovation per scrape interval, so queries whose windows overlap share that part of their
# noise (two passes 30 s apart over 60 s windows: correlation 0.5), as Prometheus' increase() does.
ACCEPTANCE_NOISE, THROUGHPUT_NOISE, BATCH_NOISE = 0.03, 0.03, 0.10
# A domain's direction in signature space: 0.8 on one dimension of its own (0.8^2 x 2 / 16 = 0.08 apart).
SIGNATURE_SEPARATION = 0.8
TOKENS_PER_SAMPLE = 128  # captured rows per request (the e2e's 32-token prompts and 96 new tokens)
# Per-version counters: drafts, drafted tokens, accepted tokens, accepted at position 0, generated, pod-steps.
DRAFTS, DRAFT_TOKENS, ACCEPTED, POSITION0, GENERATED, POD_STEPS = range(6)


def true_speedup(a: float, g: int, b: float, cost_error: float) -> float:
    if g == 0:
        return 1.0
    draft = DEFAULT_PROFILE.draft_cost(b) * (1 + cost_error)
    verify = 1 + (DEFAULT_PROFILE.verify_cost(b, g) - 1) * (1 + cost_error)
    return expected_acceptance_length(a, g) / (draft * g + verify)


def best_g(a: float, b: float, cost_error: float) -> int:
    return max(range(G + 1), key=lambda g: true_speedup(a, g, b, cost_error))


def base_rate(b: float) -> float:
    """Tokens/s per engine without speculation, up to a constant: b / T(b), T(n) = 1 + n / 320."""
    return b / (1 + b / 320.0)


def traffic_signature(weights: tuple[float, ...], samples: float) -> DomainSignature:
    """The capture signature of ``samples`` requests of the domain mix ``weights``: a mixture of unit Gaussians."""
    mean, second = [0.0] * SIGNATURE_DIMENSIONS, [0.0] * SIGNATURE_DIMENSIONS
    total = sum(weights) or 1.0
    for d, w in enumerate(weights):
        for j in range(SIGNATURE_DIMENSIONS):
            mu = SIGNATURE_SEPARATION if j == d % SIGNATURE_DIMENSIONS else 0.0
            mean[j] += w / total * mu
            second[j] += w / total * (1.0 + mu * mu)
    std = tuple(max(s - m * m, 1e-12) ** 0.5 for s, m in zip(second, mean, strict=True))
    return DomainSignature(mean=tuple(mean), std=std, tokens=max(1, round(samples * TOKENS_PER_SAMPLE)),
                           projection=PROJECTION)


@dataclass(frozen=True)
class Draft:
    name: str  # the version its pods report: "initial", "vN", or a candidate's run id
    live: tuple[float, ...]  # true per-token acceptance per domain
    signature: DomainSignature | None = None  # of the window it was trained on (its manifest's); launch: None

    def acceptance(self, weights: tuple[float, ...]) -> float:
        return sum(w * a for w, a in zip(weights, self.live, strict=True))


@dataclass
class Pod:
    name: str
    draft: Draft
    enabled: bool = True
    bands: Bands | None = None  # None: the launch table (K = G at every batch size)
    engine_g: int | None = None  # the engine's own per-step choice (TIDE-adaptive, the oracle)

    def g_at(self, b: float) -> int:
        if not self.enabled:
            return 0
        if self.engine_g is not None:
            return self.engine_g
        return G if self.bands is None else tokens_for_batch_size(self.bands, b)


@dataclass(frozen=True)
class Job:
    run_id: str
    finishes_at: float
    candidate: Draft
    eval_length: float  # the trainer's held-out acceptance length of the candidate
    baseline_length: float  # and of the parent (served) draft on the same requests


@dataclass(frozen=True)
class RecallJob:
    """A recall evaluation (issue 16): the pooled drafts and the served one scored on the same samples."""

    run_id: str
    finishes_at: float
    scores: dict[str, float]  # pooled version -> the evaluation's acceptance length
    served_length: float


@dataclass
class Deployment:
    """One policy's copy of the deployment."""

    pods: list[Pod]
    pointer: Draft  # what the pointer names (the launch draft until a promotion)
    capture: bool = False
    buffer: list[Entry] = field(default_factory=list)  # one shard per step captured
    samples_since_launch: float = 0.0
    job: Job | RecallJob | None = None
    finished: dict[str, Job | RecallJob] = field(default_factory=dict)  # run id -> its Job, once it ended
    versions: dict[str, Draft] = field(default_factory=dict)  # promoted versions and candidates by name
    rows: list[dict[str, np.ndarray]] = field(default_factory=list)  # per-version counter increments per step
    promotions: int = 0
    training_gpu_s: float = 0.0  # seconds a trainer or evaluation Job held a training GPU

    @classmethod
    def launched(cls, launch: Draft, enabled: bool = True) -> Deployment:
        pods = [Pod(f"pod-{i}", launch, enabled) for i in range(REPLICAS)]
        return cls(pods, launch, versions={launch.name: launch})


class Noise:
    """Pre-drawn streams, shared by every policy of a scenario (paired comparisons)."""

    def __init__(self, scenario: Scenario) -> None:
        rng = np.random.default_rng([7, scenario.seed, len(scenario.name)])
        scrapes, ticks = int(scenario.duration_s / SCRAPE_S) + 2, int(scenario.duration_s / TICK_S) + 2
        early = np.random.default_rng([7, scenario.seed, len(scenario.name), 1])  # before the first scrape
        self.acceptance = _windowed(rng, early, ACCEPTANCE_NOISE, scrapes)  # served, canary, control
        self.throughput = _windowed(rng, early, THROUGHPUT_NOISE, scrapes)
        self.batch = rng.normal(0, BATCH_NOISE, scrapes)
        self.eval = rng.normal(0, scenario.world.eval_noise, (ticks, 2))  # candidate, baseline
        lo, hi = scenario.world.regression
        regress = rng.random(ticks) < scenario.world.regression_probability
        self.regression = np.where(regress, rng.uniform(lo, hi, ticks), 0.0)
        self.engine = rng.normal(0, 0.01, int(scenario.duration_s / STEP_S) + 2)  # in-engine monitor
        # A recall evaluation's noise per pooled draft (up to 8) and the served one (drawn last: the
        # streams above keep their values).
        self.recall = rng.normal(0, scenario.world.eval_noise, (ticks, 9))


def _windowed(rng: np.random.Generator, early: np.random.Generator, sd: float, scrapes: int) -> np.ndarray:
    """Per scrape and group: the mean of the innovations of the scrape intervals the rate window covers."""
    per_window = max(1, round(RATE_WINDOW_S / SCRAPE_S))
    z = np.vstack([early.normal(0, 1, (per_window - 1, 3)), rng.normal(0, 1, (scrapes, 3))])
    sums = np.cumsum(np.vstack([np.zeros((1, 3)), z * sd * np.sqrt(per_window)]), axis=0)
    return (sums[per_window:] - sums[:-per_window]) / per_window


class World:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario, self.params, self.noise = scenario, scenario.world, Noise(scenario)
        self.times = np.arange(0.0, scenario.duration_s, STEP_S)
        self.batches = [scenario.segment_at(t).batch_at(t) for t in self.times]
        self.weights = [scenario.weights_at(t) for t in self.times]
        self.launch = Draft("initial", scenario.launch)

    def weight(self, i: int) -> float:
        """No-speculation tokens of step i: the weight of its throughput ratio."""
        return base_rate(self.batches[i])

    def step(self, dep: Deployment, i: int) -> float:
        """Serve step i; returns its throughput over no speculation (costs included)."""
        t, b, w = float(self.times[i]), self.batches[i], self.weights[i]
        rate, row, total = base_rate(b) * STEP_S, {}, 0.0
        for pod in dep.pods:
            a, g = pod.draft.acceptance(w), pod.g_at(b)
            speedup = true_speedup(a, g, b, self.params.cost_error)
            total += speedup
            counters = row.setdefault(pod.draft.name, np.zeros(6))
            tokens = rate * speedup
            counters[GENERATED] += tokens
            counters[POD_STEPS] += 1
            if g:
                drafts = tokens / expected_acceptance_length(a, g)
                counters[DRAFTS:POSITION0 + 1] += (drafts, drafts * g, tokens - drafts, drafts * a)
        dep.rows.append(row)
        cost = (1 - self.params.capture_cost * dep.capture) * (1 - self.params.training_cost * (dep.job is not None))
        if dep.capture:
            captured = self.params.capture_samples_per_s * STEP_S
            dep.buffer.append((t, captured, w))
            dep.samples_since_launch += captured
            _prune(dep.buffer)
        if dep.job is not None:
            dep.training_gpu_s += STEP_S
        if dep.job is not None and t + STEP_S >= dep.job.finishes_at:
            dep.finished[dep.job.run_id] = dep.job
            dep.job = None
        return cost * total / len(dep.pods)

    # ---- training -----------------------------------------------------------------------------
    def launch_training(self, dep: Deployment, run_id: str, t: float, captured_since: float | None = None,
                        min_samples: int = 0) -> None:
        """Train from the served draft on the window the operator claims (capture_retention.claim_shards).

        The newest window of the buffer; with ``captured_since`` (the operator's LaunchTraining after a
        shift) only what was captured since, topped up to ``min_samples`` (sampleThreshold).
        """
        window = claimed(dep.buffer, t, captured_since, min_samples)
        shares = buffer_shares(window, len(self.scenario.ceilings))
        if shares is None:
            shares = self.scenario.weights_at(t)
        k = int(t // TICK_S)
        trained = self.trained(dep.pointer.live, shares)
        live = tuple(max(0.0, e - self.noise.regression[k] * s) for e, s in zip(trained, shares, strict=True))
        eval_a = sum(s * e for s, e in zip(shares, trained, strict=True))
        base_a = sum(s * p for s, p in zip(shares, dep.pointer.live, strict=True))
        eval_length = expected_acceptance_length(eval_a, G) * (1 + self.noise.eval[k, 0])
        baseline = expected_acceptance_length(base_a, G) * (1 + self.noise.eval[k, 1])
        signature = traffic_signature(shares, sum(n for _, n, _ in window) or SAMPLE_THRESHOLD)
        dep.job = Job(run_id, t + self.params.training_s, Draft(run_id, live, signature), eval_length, baseline)
        dep.versions[run_id] = dep.job.candidate
        dep.samples_since_launch = 0.0

    def launch_recall(self, dep: Deployment, run_id: str, t: float, versions: tuple[str, ...],
                      captured_since: float | None, min_samples: int) -> None:
        """Score ``versions`` and the served draft on the window production's claim names (since the
        shift), with the trainer's estimate: the true acceptance length on that window's domain mix,
        with the evaluation's noise. No draft changes; only the training GPU's time is spent."""
        window = claimed(dep.buffer, t, captured_since, min_samples)
        shares = buffer_shares(window, len(self.scenario.ceilings)) or self.scenario.weights_at(t)
        noise = self.noise.recall[int(t // TICK_S)]

        def score(draft: Draft, i: int) -> float:
            return expected_acceptance_length(draft.acceptance(shares), G) * (1 + noise[i])

        scores = {v: score(dep.versions[v], i) for i, v in enumerate(versions[:8])}
        dep.job = RecallJob(run_id, t + self.params.recall_s, scores, score(dep.pointer, 8))

    def trained(self, parent: tuple[float, ...], shares: tuple[float, ...]) -> tuple[float, ...]:
        """Each domain closes gain x share of its gap to the ceiling; the others forget."""
        out = []
        for d, (p, s) in enumerate(zip(parent, shares, strict=True)):
            gained = p + self.params.training_gain * s * (self.scenario.ceilings[d] - p)
            forgotten = self.params.forgetting * (1 - s) * max(0.0, p - self.scenario.forgotten_level(d))
            out.append(min(gained - forgotten, self.scenario.ceilings[d]))
        return tuple(out)


def capture_objects(buffer: list[Entry]) -> list[CaptureObject]:
    """The buffer as production's listing sees it: samples and each shard's signature from its metadata."""
    return [CaptureObject(str(i), 0, at, round(n), traffic_signature(w, n)) for i, (at, n, w) in enumerate(buffer)]


def claimed(buffer: list[Entry], t: float, captured_since: float | None, min_samples: int) -> list[Entry]:
    """The entries production's claim would name: the same pure window (control/retention.claim_window)."""
    shards = [CaptureObject(str(i), 0, at, round(n)) for i, (at, n, _) in enumerate(buffer)]
    window = claim_window(shards, WINDOW_SHARDS, RETENTION_S, t, since=captured_since, min_samples=min_samples)
    return [buffer[int(c.key)] for c in window]


def buffer_shares(buffer: list[Entry], domains: int) -> tuple[float, ...] | None:
    total = sum(n for _, n, _ in buffer)
    if total <= 0:
        return None
    shares = [0.0] * domains
    for _, n, w in buffer:
        for d in range(domains):
            shares[d] += n * w[d] / total
    return tuple(shares)


def _prune(buffer: list[Entry]) -> None:
    """Retention keeps the newest maxBufferSamples."""
    total = sum(n for _, n, _ in buffer)
    while buffer and total - buffer[0][1] >= MAX_BUFFER_SAMPLES:
        total -= buffer.pop(0)[1]
