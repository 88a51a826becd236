"""Capture in the simulator: finished requests become hidden-state shards (synthetic tensors, the
trainer's real schema: tide_contracts.shards) written to S3 under <destination>/<pod>/<ms>-<seq>.

Sampling is per request and deterministic: request r is captured when a hash of (seed, r) falls
under the sampling rate. Tensors come from a generator seeded the same way, so the same scenario,
seed and requests write the same rows.

The rows are learnable, so the real trainer can turn them into a better draft: the simulated
"target" walks a fixed permutation of the vocabulary (the next token is a function of the current
one) and its auxiliary hidden states are noisy fixed projections of the current token. The
"target" (permutation and projections) depends only on the capture model's shape and tokenizer
hash, like a real target, not on the scenario's seed or the request.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tide_contracts.registry import capture_metadata
from tide_contracts.serving_control import DEFAULT_SAMPLING_RATE, CaptureCounters, CaptureState
from tide_contracts.shards import HiddenStateShard, RequestMeta, ShardHeader, shard_to_bytes
from tide_contracts.signature import domain_signature
from tide_vllm_sim.engine import FinishedRequest
from tide_vllm_sim.s3io import StorageError, put_object
from tide_vllm_sim.scenario import CaptureModel


@dataclass(frozen=True)
class CaptureSettings:
    """The pod environment's capture knobs (serving-control contract)."""

    destination: str | None = None
    sampling_rate: float = DEFAULT_SAMPLING_RATE
    buffer_tokens: int = 65536
    shard_tokens: int = 4096
    flush_s: float = 10.0
    pod_name: str = field(default_factory=socket.gethostname)

    @classmethod
    def from_env(cls) -> CaptureSettings:
        env = os.environ
        return cls(
            destination=env.get("TIDE_CAPTURE_URI") or None,
            sampling_rate=float(env.get("TIDE_CAPTURE_SAMPLING_RATE") or DEFAULT_SAMPLING_RATE),
            buffer_tokens=int(env.get("TIDE_CAPTURE_BUFFER_TOKENS") or 65536),
            shard_tokens=int(env.get("TIDE_CAPTURE_SHARD_TOKENS") or 4096),
            flush_s=float(env.get("TIDE_CAPTURE_FLUSH_S") or 10.0),
            pod_name=env.get("TIDE_POD_NAME") or socket.gethostname(),
        )


@dataclass(frozen=True)
class CapturedRequest:
    meta: RequestMeta
    token_ids: np.ndarray  # [T] int64
    labels: np.ndarray  # [T] int64
    loss_mask: np.ndarray  # [T] bool
    aux: np.ndarray  # [T, 3, H] float32


def unit_hash(seed: int, request_id: str) -> float:
    """A deterministic uniform number in [0, 1) for a request."""
    digest = hashlib.sha256(f"{seed}:{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


AUX_NOISE = 0.1  # relative to the unit-variance projections


@functools.lru_cache(maxsize=8)
def _target(model: CaptureModel) -> tuple[np.ndarray, np.ndarray]:
    """The simulated target of a capture model: next-token permutation, [3, vocab, hidden] projections."""
    world = np.random.default_rng(int(hashlib.sha256(
        f"{model.tokenizer_hash}:{model.vocab_size}:{model.hidden_size}".encode()).hexdigest()[:16], 16))
    successor = world.permutation(model.vocab_size).astype(np.int64)
    projections = world.standard_normal((3, model.vocab_size, model.hidden_size), dtype=np.float32)
    return successor, projections


def synthetic_request(req: FinishedRequest, model: CaptureModel, seed: int, target_revision: str) -> CapturedRequest:
    """Rows of a captured request: prompt rows (not trained on) then generated rows."""
    rng = np.random.default_rng(int(unit_hash(seed, req.request_id) * 2**63))
    rows = min(req.prompt_tokens + req.output_tokens, model.max_rows_per_request)
    prompt_rows = min(req.prompt_tokens, rows - 1)
    successor, projections = _target(model)
    sequence = np.empty(rows + 1, dtype=np.int64)
    sequence[0] = rng.integers(0, model.vocab_size)
    for i in range(rows):
        sequence[i + 1] = successor[sequence[i]]
    aux = projections[:, sequence[:-1]].transpose(1, 0, 2)  # [rows, 3, hidden]
    aux = aux + AUX_NOISE * rng.standard_normal(aux.shape, dtype=np.float32)
    mask = np.arange(rows) >= prompt_rows - 1  # label of the last prompt row is the first generated token
    meta = RequestMeta(req.request_id, target_revision, req.draft_version, req.acceptance_rate)
    return CapturedRequest(meta, sequence[:-1], sequence[1:], mask, aux)


def build_shard(requests: list[CapturedRequest], model: CaptureModel, target_revision: str) -> HiddenStateShard:
    header = ShardHeader(target_revision=target_revision, tokenizer_hash=model.tokenizer_hash,
                         aux_layer_ids=model.aux_layer_ids, hidden_size=model.hidden_size, dtype=model.dtype,
                         requests=tuple(r.meta for r in requests))
    offsets = np.cumsum([0] + [len(r.token_ids) for r in requests]).astype(np.int64)
    return HiddenStateShard(
        header=header, token_ids=np.concatenate([r.token_ids for r in requests]),
        aux_hidden_states=np.concatenate([r.aux for r in requests]),
        labels=np.concatenate([r.labels for r in requests]), request_offsets=offsets,
        loss_mask=np.concatenate([r.loss_mask for r in requests]))


class CaptureRecorder:
    """Capture state, the host buffer and the shard writer of one simulated pod."""

    def __init__(self, settings: CaptureSettings, model: CaptureModel, seed: int, target_revision: str) -> None:
        self.settings, self.model, self.seed = settings, model, seed
        self.target_revision = target_revision
        self.enabled = False
        self.sampling_rate = settings.sampling_rate
        self.destination = settings.destination
        self.counters = CaptureCounters()
        self._buffer: list[CapturedRequest] = []
        self._oldest: float | None = None
        self._seq = 0
        self._lock = threading.RLock()  # _bump runs both inside and outside the buffer's critical sections

    def state(self) -> CaptureState:
        with self._lock:
            counters = self.counters.model_copy(update={"buffered_tokens": self._buffered_rows()})
            return CaptureState(enabled=self.enabled, sampling_rate=self.sampling_rate,
                                destination=self.destination, counters=counters)

    def configure(self, enabled: bool, sampling_rate: float | None, destination: str | None) -> None:
        """Apply a capture request; turning off flushes what is buffered."""
        if enabled and not (destination or self.destination):
            raise ValueError("capture needs a destination: none in the request and TIDE_CAPTURE_URI is unset")
        with self._lock:
            self.sampling_rate = sampling_rate if sampling_rate is not None else self.sampling_rate
            self.destination = destination or self.destination
            self.enabled = enabled
        if not enabled:
            self.flush()

    def offer(self, request: FinishedRequest) -> None:
        if not self.enabled or unit_hash(self.seed, request.request_id) >= self.sampling_rate:
            return
        captured = synthetic_request(request, self.model, self.seed, self.target_revision)
        with self._lock:
            if self._buffered_rows() + len(captured.token_ids) > self.settings.buffer_tokens:
                self._bump(dropped_samples=1)
                return
            self._buffer.append(captured)
            self._oldest = self._oldest if self._oldest is not None else time.monotonic()
            full = self._buffered_rows() >= self.settings.shard_tokens
        if full:
            self.flush()

    def flush_if_due(self) -> None:
        oldest = self._oldest
        if oldest is not None and time.monotonic() - oldest >= self.settings.flush_s:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            requests, self._buffer, self._oldest = self._buffer, [], None
            if not requests or self.destination is None:
                return
            self._seq += 1
            seq, destination = self._seq, self.destination
        shard = build_shard(requests, self.model, self.target_revision)
        data = shard_to_bytes(shard)
        key = f"{self.settings.pod_name}/{int(time.time() * 1000)}-{seq:06d}.safetensors"
        # The plugin's metadata: requests held and the rows' domain signature (tide_contracts.signature).
        signature = domain_signature([shard.aux_hidden_states], self.model.hidden_size)
        try:
            put_object(destination, key, data, capture_metadata(len(requests), signature))
        except StorageError:
            self._bump(write_errors=1)
            return
        rows = sum(len(r.token_ids) for r in requests)
        self._bump(captured_tokens=rows, captured_bytes=len(data), shards_written=1)

    def _buffered_rows(self) -> int:
        return sum(len(r.token_ids) for r in self._buffer)

    def _bump(self, **deltas: int) -> None:
        with self._lock:
            current = self.counters.model_dump()
            self.counters = CaptureCounters(**{k: current[k] + deltas.get(k, 0) for k in current})
