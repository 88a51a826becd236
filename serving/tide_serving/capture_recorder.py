"""Per-request accumulation of captured rows on the engine thread (pure numpy; no vLLM import).

A request is sampled whole, at first sight, and only if it is first seen while still in prefill (a
request already running when capture turns on is skipped: its beginning is lost). Its served rows
accumulate step by step; when it finishes, the rows become one `CapturedRequest` with labels (the
next token of the sequence) and a loss mask (true where that token was the target's own choice),
handed to the writer. Memory is bounded: a request that would exceed the budget is dropped whole
and counted. Nothing here blocks: the hand-off to the writer is a non-blocking put.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tide_serving.capture_rows import ServedRows


@dataclass(frozen=True)
class CapturedRequest:
    """One finished request's served rows; aux_bits is [T, n_aux, H] (bf16 bit patterns as uint16,
    or float32), row t holds the target's states after reading token_ids[t]."""

    request_id: str
    token_ids: np.ndarray  # [T] int64
    aux: np.ndarray  # [T, n_aux, H]
    labels: np.ndarray  # [T] int64
    loss_mask: np.ndarray  # [T] bool

    @property
    def num_rows(self) -> int:
        return int(self.token_ids.shape[0])


@dataclass
class CaptureCounters:
    captured_tokens: int = 0
    captured_bytes: int = 0
    shards_written: int = 0
    dropped_samples: int = 0
    write_errors: int = 0
    engine_seconds: float = 0.0
    writer_seconds: float = 0.0


@dataclass
class _Pending:
    prompt_len: int
    start_pos: int
    next_pos: int
    tokens: list[np.ndarray] = field(default_factory=list)
    aux: list[np.ndarray] = field(default_factory=list)
    last_emitted: int | None = None


def is_sampled(request_id: str, rate: float) -> bool:
    """Deterministic per request (same answer on every rank and every step)."""
    return zlib.crc32(request_id.encode()) / 2**32 < rate


class CaptureRecorder:
    """Engine-thread side of capture. `sink` must not block; it returns False when full."""

    def __init__(self, sink: Callable[[CapturedRequest], bool], counters: CaptureCounters,
                 max_buffered_rows: int) -> None:
        self._sink = sink
        self.counters = counters
        self.max_buffered_rows = max_buffered_rows
        self.enabled = False
        self.sampling_rate = 0.0
        self._pending: dict[str, _Pending] = {}
        self._skipped: set[str] = set()
        self.buffered_rows = 0
        self.last_step = time.monotonic()

    def configure(self, enabled: bool, sampling_rate: float) -> None:
        self.enabled, self.sampling_rate = enabled, sampling_rate
        if not enabled:  # hand over what was captured; a request still running ends its sample here
            self.finish(list(self._pending))
            self._skipped.clear()

    def finish_if_idle(self, idle_s: float) -> None:
        """The engine reports finished requests only with its next step: after `idle_s` without a
        step, every pending request has finished (or is paused), so hand them over."""
        if self._pending and time.monotonic() - self.last_step >= idle_s:
            self.finish(list(self._pending))

    def select(self, blocks: Sequence[ServedRows], first_position: Callable[[ServedRows], int],
               prompt_len: Callable[[str], int]) -> list[ServedRows]:
        """The blocks of this step to gather (requests being captured)."""
        if not self.enabled:
            return []
        chosen = []
        for b in blocks:
            if b.count <= 0 or b.request_id in self._skipped:
                continue
            if b.request_id not in self._pending and not self._admit(b, first_position(b), prompt_len):
                continue
            chosen.append(b)
        return chosen

    def _admit(self, b: ServedRows, pos: int, prompt_len: Callable[[str], int]) -> bool:
        plen = prompt_len(b.request_id)
        if pos >= plen or not is_sampled(b.request_id, self.sampling_rate):
            self._skipped.add(b.request_id)
            return False
        self._pending[b.request_id] = _Pending(prompt_len=plen, start_pos=pos, next_pos=pos)
        return True

    def record(self, blocks: Sequence[ServedRows], positions: np.ndarray, token_ids: np.ndarray,
               aux: np.ndarray) -> None:
        """Append the gathered rows; arrays hold the selected blocks' rows back to back."""
        self.last_step = time.monotonic()
        row = 0
        for b in blocks:
            pend = self._pending.get(b.request_id)
            rows = slice(row, row + b.count)
            row += b.count
            if pend is None:
                continue
            self._append(b, pend, positions[rows], token_ids[rows], aux[rows])

    def _append(self, b: ServedRows, pend: _Pending, pos: np.ndarray, tok: np.ndarray,
                aux: np.ndarray) -> None:
        skip = pend.next_pos - int(pos[0])  # rows recomputed after a preemption were captured already
        if skip < 0 or self.buffered_rows + len(pos) - max(skip, 0) > self.max_buffered_rows:
            self._drop(b.request_id)
            return
        if skip < len(pos):
            pend.tokens.append(tok[skip:].astype(np.int64, copy=True))
            pend.aux.append(aux[skip:].copy())
            pend.next_pos = int(pos[-1]) + 1
            self.buffered_rows += len(pos) - skip
        if b.sampled:
            pend.last_emitted = int(b.sampled[-1])

    def _drop(self, request_id: str) -> None:
        pend = self._pending.pop(request_id, None)
        if pend is not None:
            self.buffered_rows -= pend.next_pos - pend.start_pos
        self._skipped.add(request_id)
        self.counters.dropped_samples += 1

    def finish(self, request_ids: Iterable[str]) -> None:
        for req_id in request_ids:
            self._skipped.discard(req_id)
            pend = self._pending.pop(req_id, None)
            if pend is None:
                continue
            self.buffered_rows -= pend.next_pos - pend.start_pos
            sample = _complete(req_id, pend)
            if sample is None:
                continue
            if self._sink(sample):
                self.counters.captured_tokens += sample.num_rows
            else:
                self.counters.dropped_samples += 1


def _complete(req_id: str, pend: _Pending) -> CapturedRequest | None:
    if not pend.tokens:
        return None
    tokens = np.concatenate(pend.tokens)
    aux = np.concatenate(pend.aux)
    if pend.last_emitted is None:
        # Never emitted (aborted during prefill): the last row's next token is unknown, drop it.
        labels, tokens, aux = tokens[1:], tokens[:-1], aux[:-1]
    else:
        labels = np.concatenate([tokens[1:], np.array([pend.last_emitted], dtype=np.int64)])
    if len(tokens) == 0:
        return None
    positions = pend.start_pos + np.arange(len(tokens))
    return CapturedRequest(req_id, tokens, aux, labels, positions + 1 >= pend.prompt_len)
