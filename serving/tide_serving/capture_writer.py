"""Asynchronous shard writer: captured requests -> shards (tide_contracts.shards) -> S3 or a directory.

Runs in its own daemon thread so the engine loop never waits on serialisation or the network. The
engine hands finished requests over with a non-blocking put into a bounded queue (full: the request
is dropped and counted). A shard is flushed when it holds `shard_rows` rows, when its oldest row is
`flush_interval_s` old, or on `flush()`. A failed upload is counted in `write_errors` and dropped:
capture is a sample of traffic, never a reason to stall serving.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tide_contracts.draft_pool import DomainSignature
from tide_contracts.encryption import S3Encryption
from tide_contracts.registry import capture_metadata
from tide_contracts.shards import SHARD_SUFFIX, HiddenStateShard, RequestMeta, ShardHeader, shard_to_bytes
from tide_contracts.signature import domain_signature
from tide_serving.capture_recorder import CaptureCounters, CapturedRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardIdentity:
    """What every shard of this pod says about its origin (the shard header's fixed part)."""

    target_revision: str
    tokenizer_hash: str
    aux_layer_ids: tuple[int, ...]
    hidden_size: int
    writer_id: str  # pod name: keeps keys of different pods apart


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def build_shard(samples: list[CapturedRequest], ident: ShardIdentity,
                draft_version: str | None) -> HiddenStateShard:
    aux = np.concatenate([s.aux for s in samples])
    aux = bf16_bits_to_float32(aux) if aux.dtype == np.uint16 else aux.astype(np.float32, copy=False)
    offsets = np.cumsum([0] + [s.num_rows for s in samples]).astype(np.int64)
    header = ShardHeader(
        target_revision=ident.target_revision, tokenizer_hash=ident.tokenizer_hash,
        aux_layer_ids=ident.aux_layer_ids, hidden_size=ident.hidden_size, dtype="bf16",
        requests=tuple(RequestMeta(s.request_id, ident.target_revision, draft_version) for s in samples))
    return HiddenStateShard(
        header=header, token_ids=np.concatenate([s.token_ids for s in samples]).astype(np.int64),
        aux_hidden_states=aux, labels=np.concatenate([s.labels for s in samples]).astype(np.int64),
        request_offsets=offsets, loss_mask=np.concatenate([s.loss_mask for s in samples]).astype(bool))


class ShardUploader:
    """Writes shard bytes under a destination: `s3://bucket/prefix` (boto3) or a local directory.

    Every S3 put carries `encryption` (the pod's TIDE_S3_SSE settings): captures are tenant data.
    """

    def __init__(self, encryption: S3Encryption | None = None, client: object | None = None) -> None:
        self.encryption = encryption or S3Encryption()
        self._s3 = client

    def put(self, destination: str, key: str, data: bytes, samples: int,
            signature: DomainSignature | None = None) -> str:
        if destination.startswith("s3://"):
            bucket, _, prefix = destination[len("s3://"):].partition("/")
            full_key = f"{prefix.rstrip('/')}/{key}" if prefix.strip("/") else key
            # The registry counts the rolling buffer's samples, and the operator sees which domain the
            # newest traffic is, from this metadata (draft-registry.md).
            self._client().put_object(Bucket=bucket, Key=full_key, Body=data,
                                      Metadata=capture_metadata(samples, signature),
                                      **self.encryption.put_args())
            return f"s3://{bucket}/{full_key}"
        path = Path(destination) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        return str(path)

    def _client(self):
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client("s3")
        return self._s3


class CaptureWriter:
    """Bounded queue + writer thread. All public methods are safe to call from the engine thread."""

    def __init__(self, ident: ShardIdentity, counters: CaptureCounters, *, shard_rows: int,
                 queue_rows: int, flush_interval_s: float, draft_version: Callable[[], str | None],
                 uploader: ShardUploader | None = None) -> None:
        self.ident, self.counters = ident, counters
        self.shard_rows, self.queue_rows, self.flush_interval_s = shard_rows, queue_rows, flush_interval_s
        self.destination: str | None = None
        self._draft_version = draft_version
        self._uploader = uploader or ShardUploader()
        self._queue: queue.SimpleQueue[CapturedRequest | None] = queue.SimpleQueue()
        self._queued_rows = 0
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._flush_requested = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tide-capture-writer", daemon=True)
        self._thread.start()

    @property
    def buffered_rows(self) -> int:
        return self._queued_rows

    def submit(self, sample: CapturedRequest) -> bool:
        """Non-blocking hand-off; False when the queue is over its row budget (caller counts a drop)."""
        with self._lock:
            if self._queued_rows + sample.num_rows > self.queue_rows:
                return False
            self._queued_rows += sample.num_rows
        self._queue.put(sample)
        return True

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Ask the writer to write what it holds now; waits until it did (or timeout)."""
        self._idle.clear()
        self._flush_requested.set()
        self._queue.put(None)  # wake the thread
        return self._idle.wait(timeout_s)

    def _run(self) -> None:
        pending: list[CapturedRequest] = []
        oldest = 0.0
        while True:
            try:
                item = self._queue.get(timeout=min(self.flush_interval_s, 1.0))
            except queue.Empty:
                item = None
            if item is not None:
                if not pending:
                    oldest = time.monotonic()
                pending.append(item)
            rows = sum(s.num_rows for s in pending)
            due = time.monotonic() - oldest >= self.flush_interval_s
            flush_now = self._flush_requested.is_set() and self._queue.empty()
            if pending and (rows >= self.shard_rows or due or flush_now):
                self._write(pending)
                pending = []
            if flush_now:
                self._flush_requested.clear()
                self._idle.set()

    def _write(self, samples: list[CapturedRequest]) -> None:
        rows = sum(s.num_rows for s in samples)
        destination = self.destination
        started = time.perf_counter()
        try:
            if destination is None:
                raise RuntimeError("capture has no destination")
            shard = build_shard(samples, self.ident, self._draft_version())
            data = shard_to_bytes(shard)
            key = f"{self.ident.writer_id}/{int(time.time() * 1000)}-{next(self._seq):06d}{SHARD_SUFFIX}"
            # A projection of the rows to 16 dimensions (a few ms per shard, off the engine thread).
            signature = domain_signature([shard.aux_hidden_states], self.ident.hidden_size)
            where = self._uploader.put(destination, key, data, len(samples), signature)
        except Exception as err:  # noqa: BLE001 - any storage failure is counted, never raised into serving
            self.counters.write_errors += 1
            log.warning("tide capture: dropping a shard of %d rows: %s", rows, err)
        else:
            self.counters.shards_written += 1
            self.counters.captured_bytes += len(data)
            log.debug("tide capture: wrote %s (%d rows, %d bytes)", where, rows, len(data))
        finally:
            self.counters.writer_seconds += time.perf_counter() - started
            with self._lock:
                self._queued_rows -= rows
