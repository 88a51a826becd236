"""Hidden-state shards: what serving captures and the trainer learns from.

Contract: docs/contracts/hidden-state-shards.md.

A shard is one safetensors file holding the target's low/middle/high layer hidden states of served
tokens, request by request. The serving plugin writes shards, the trainer reads them; both use this
module so a format change breaks a test instead of production.

Only numpy is needed (the serving image has no trainer). The safetensors container is read and written
here directly (8-byte little-endian header length, JSON header, raw little-endian buffer) because
numpy has no bfloat16: bf16 states are encoded from and decoded to float32 by bit arithmetic. Files are
standard safetensors and load with `safetensors.torch` as well.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_NAME = "tide-hidden-states"
FORMAT_VERSION = 1
NUM_AUX_LAYERS = 3  # EAGLE-3 concatenates a low, a middle and a high target layer
HIDDEN_DTYPES = ("bf16", "fp16", "fp32")
SHARD_SUFFIX = ".safetensors"
_MAX_HEADER_BYTES = 100 * 1024 * 1024

# safetensors dtype tag <-> numpy dtype (bf16 has no numpy dtype: raw uint16 bits)
_ST_DTYPES: dict[str, np.dtype[Any]] = {"I64": np.dtype("<i8"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
              "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
_HIDDEN_TAG = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}


class ShardError(ValueError):
    """A shard is corrupt or breaks the contract; the message names the field."""


@dataclass(frozen=True)
class RequestMeta:
    """What serving knew about one captured request."""

    request_id: str
    target_revision: str
    draft_version: str | None = None  # draft served while capturing (None: speculation off)
    served_acceptance_rate: float | None = None  # accepted / proposed draft tokens, None if not drafted

    def to_json(self) -> dict[str, object]:
        return {"request_id": self.request_id, "target_revision": self.target_revision,
                "draft_version": self.draft_version, "served_acceptance_rate": self.served_acceptance_rate}


@dataclass(frozen=True)
class ShardHeader:
    """Shard-level metadata, stored as strings in the safetensors __metadata__."""

    target_revision: str
    tokenizer_hash: str
    aux_layer_ids: tuple[int, ...]
    hidden_size: int
    dtype: str  # storage dtype of the hidden states: bf16 | fp16 | fp32
    requests: tuple[RequestMeta, ...]
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    format_version: int = FORMAT_VERSION


@dataclass(frozen=True)
class HiddenStateShard:
    """Arrays of one shard; T tokens over R requests, H the target's hidden size.

    Row t holds the target's states after reading token_ids[t]; labels[t] is the token the target chose
    next. Requests are contiguous rows request_offsets[r]:request_offsets[r+1].
    """

    header: ShardHeader
    token_ids: np.ndarray  # [T] int64
    aux_hidden_states: np.ndarray  # [T, 3, H] float32 in memory (stored as header.dtype)
    labels: np.ndarray  # [T] int64
    request_offsets: np.ndarray  # [R+1] int64, 0 .. T
    loss_mask: np.ndarray | None = None  # [T] bool, False where the label was not the target's choice
    last_hidden_states: np.ndarray | None = None  # [T, H] float32, optional (not exposed on CPU)

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def num_requests(self) -> int:
        return int(self.request_offsets.shape[0] - 1)

    def request_rows(self, r: int) -> slice:
        return slice(int(self.request_offsets[r]), int(self.request_offsets[r + 1]))


# ---------------------------------------------------------------- validation


def validate_shard(shard: HiddenStateShard) -> None:
    """Raise ShardError naming the first field that breaks the contract."""
    h = shard.header
    if h.format_version != FORMAT_VERSION:
        raise ShardError(f"format_version: {h.format_version} is not supported (expected {FORMAT_VERSION})")
    if h.dtype not in HIDDEN_DTYPES:
        raise ShardError(f"dtype: {h.dtype!r} is not one of {HIDDEN_DTYPES}")
    if len(h.aux_layer_ids) != NUM_AUX_LAYERS:
        raise ShardError(f"aux_layer_ids: expected {NUM_AUX_LAYERS} layer ids, got {list(h.aux_layer_ids)}")
    if h.hidden_size <= 0:
        raise ShardError(f"hidden_size: must be positive, got {h.hidden_size}")
    _check_array("token_ids", shard.token_ids, np.int64, ndim=1)
    t = shard.num_tokens
    _check_array("labels", shard.labels, np.int64, shape=(t,))
    aux_shape = (t, NUM_AUX_LAYERS, h.hidden_size)
    _check_array("aux_hidden_states", shard.aux_hidden_states, np.float32, shape=aux_shape)
    if shard.loss_mask is not None:
        _check_array("loss_mask", shard.loss_mask, np.bool_, shape=(t,))
    if shard.last_hidden_states is not None:
        _check_array("last_hidden_states", shard.last_hidden_states, np.float32, shape=(t, h.hidden_size))
    _check_offsets(shard.request_offsets, t, len(h.requests))
    if t and (shard.token_ids.min() < 0 or shard.labels.min() < 0):
        raise ShardError("token_ids/labels: token ids must be non-negative")


def _check_array(name: str, a: np.ndarray, dtype: type, *, ndim: int | None = None,
                 shape: tuple[int, ...] | None = None) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype):
        got = getattr(a, "dtype", type(a).__name__)
        raise ShardError(f"{name}: expected a numpy array of {np.dtype(dtype)}, got {got}")
    if ndim is not None and a.ndim != ndim:
        raise ShardError(f"{name}: expected {ndim} dimension(s), got shape {list(a.shape)}")
    if shape is not None and tuple(a.shape) != shape:
        raise ShardError(f"{name}: expected shape {list(shape)}, got {list(a.shape)}")


def _check_offsets(offsets: np.ndarray, num_tokens: int, num_requests: int) -> None:
    _check_array("request_offsets", offsets, np.int64, ndim=1)
    if offsets.shape[0] != num_requests + 1:
        raise ShardError(f"request_offsets: expected {num_requests + 1} entries for {num_requests} requests "
                         f"in metadata 'requests', got {offsets.shape[0]}")
    if offsets[0] != 0 or offsets[-1] != num_tokens:
        raise ShardError(f"request_offsets: must run from 0 to {num_tokens}, got {offsets[0]}..{offsets[-1]}")
    if num_requests and np.any(np.diff(offsets) <= 0):
        raise ShardError("request_offsets: must be strictly increasing (no empty requests)")


# ---------------------------------------------------------------- writing


def shard_to_bytes(shard: HiddenStateShard) -> bytes:
    """Serialise a validated shard to safetensors bytes."""
    validate_shard(shard)
    h = shard.header
    tensors: dict[str, tuple[str, np.ndarray]] = {
        "token_ids": ("I64", shard.token_ids),
        "aux_hidden_states": (_HIDDEN_TAG[h.dtype], _encode_hidden(shard.aux_hidden_states, h.dtype)),
        "labels": ("I64", shard.labels),
        "request_offsets": ("I64", shard.request_offsets),
    }
    if shard.loss_mask is not None:
        tensors["loss_mask"] = ("U8", shard.loss_mask.astype(np.uint8))
    if shard.last_hidden_states is not None:
        last = _encode_hidden(shard.last_hidden_states, h.dtype)
        tensors["last_hidden_states"] = (_HIDDEN_TAG[h.dtype], last)
    return _pack_safetensors(tensors, _header_metadata(h))


def write_shard(path: str | Path, shard: HiddenStateShard) -> int:
    """Write a shard atomically (temp file + rename); returns the bytes written."""
    data = shard_to_bytes(shard)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return len(data)


def _header_metadata(h: ShardHeader) -> dict[str, str]:
    return {
        "format": FORMAT_NAME,
        "format_version": str(h.format_version),
        "target_revision": h.target_revision,
        "tokenizer_hash": h.tokenizer_hash,
        "aux_layer_ids": json.dumps(list(h.aux_layer_ids)),
        "hidden_size": str(h.hidden_size),
        "dtype": h.dtype,
        "created_at": h.created_at,
        "requests": json.dumps([r.to_json() for r in h.requests]),
    }


def _encode_hidden(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "fp32":
        return x
    if dtype == "fp16":
        return x.astype(np.float16)
    # bf16: round float32 bits to nearest even, keep the top 16 bits
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype(np.uint16)


def _pack_safetensors(tensors: dict[str, tuple[str, np.ndarray]], metadata: dict[str, str]) -> bytes:
    header: dict[str, object] = {"__metadata__": metadata}
    chunks, offset = [], 0
    for name, (tag, array) in tensors.items():
        raw = np.ascontiguousarray(array, dtype=_ST_DTYPES[tag]).tobytes()
        header[name] = {"dtype": tag, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # safetensors pads the header to 8-byte alignment
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)


# ---------------------------------------------------------------- reading


def read_shard(source: str | Path | bytes) -> HiddenStateShard:
    """Read and validate a shard from a path or from bytes; hidden states come back as float32."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    entries, metadata = _unpack_safetensors(data)
    header = _parse_metadata(metadata)
    arrays = {name: _decode_tensor(name, tag, shape, raw) for name, (tag, shape, raw) in entries.items()}
    for required in ("token_ids", "aux_hidden_states", "labels", "request_offsets"):
        if required not in arrays:
            raise ShardError(f"{required}: tensor missing from shard")
    for name in ("aux_hidden_states", "last_hidden_states"):
        if name in entries and entries[name][0] != _HIDDEN_TAG.get(header.dtype):
            raise ShardError(f"{name}: stored as {entries[name][0]} but metadata dtype says {header.dtype}")
    mask = arrays.get("loss_mask")
    shard = HiddenStateShard(
        header=header, token_ids=arrays["token_ids"], aux_hidden_states=arrays["aux_hidden_states"],
        labels=arrays["labels"], request_offsets=arrays["request_offsets"],
        loss_mask=None if mask is None else mask.astype(bool),
        last_hidden_states=arrays.get("last_hidden_states"))
    validate_shard(shard)
    return shard


def read_shard_header(source: str | Path | bytes) -> ShardHeader:
    """Only the metadata (cheap: no tensor is decoded)."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    return _parse_metadata(_unpack_safetensors(data)[1])


def _unpack_safetensors(data: bytes) -> tuple[dict[str, tuple[str, list[int], bytes]], dict[str, str]]:
    if len(data) < 8:
        raise ShardError(f"corrupt shard: {len(data)} bytes is too short for a safetensors header")
    (head_len,) = struct.unpack("<Q", data[:8])
    if head_len > min(_MAX_HEADER_BYTES, len(data) - 8):
        raise ShardError(f"corrupt shard: header length {head_len} exceeds the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + head_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ShardError(f"corrupt shard: header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise ShardError("corrupt shard: header is not a JSON object")
    body = data[8 + head_len:]
    metadata = header.pop("__metadata__", None) or {}
    entries = {}
    for name, info in header.items():
        try:
            tag, shape, (start, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise ShardError(f"corrupt shard: bad header entry for {name}") from e
        if not 0 <= start <= end <= len(body):
            raise ShardError(f"corrupt shard: {name} data [{start}, {end}) lies outside the "
                             f"{len(body)}-byte body")
        entries[name] = (tag, shape, body[start:end])
    return entries, metadata


def _decode_tensor(name: str, tag: str, shape: list[int], raw: bytes) -> np.ndarray:
    if tag not in _ST_DTYPES:
        raise ShardError(f"{name}: unsupported dtype {tag}")
    dt = _ST_DTYPES[tag]
    if len(raw) != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
        raise ShardError(f"corrupt shard: {name} has {len(raw)} bytes, not shape {shape} of {tag}")
    a = np.frombuffer(raw, dtype=dt).reshape(shape)
    if tag == "BF16":
        return np.asarray((a.astype(np.uint32) << 16).view(np.float32))
    if tag == "F16":
        return a.astype(np.float32)
    if tag == "U8":
        return a.astype(np.bool_)
    return a.astype(dt.newbyteorder("="), copy=True)


def _parse_metadata(m: dict[str, str]) -> ShardHeader:
    if m.get("format") != FORMAT_NAME:
        got = m.get("format")
        raise ShardError(f"format: expected {FORMAT_NAME!r} in the safetensors metadata, got {got!r}")
    try:
        known = set(RequestMeta.__dataclass_fields__)  # newer writers may add fields: ignored
        requests = tuple(RequestMeta(**{k: v for k, v in r.items() if k in known}) for r in json.loads(m["requests"]))
        return ShardHeader(
            format_version=int(m["format_version"]), target_revision=m["target_revision"],
            tokenizer_hash=m["tokenizer_hash"],
            aux_layer_ids=tuple(int(i) for i in json.loads(m["aux_layer_ids"])),
            hidden_size=int(m["hidden_size"]), dtype=m["dtype"], created_at=m["created_at"],
            requests=requests)
    except KeyError as e:
        raise ShardError(f"{e.args[0]}: missing from the shard metadata") from e
    except (TypeError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        raise ShardError(f"corrupt shard metadata: {e}") from e
