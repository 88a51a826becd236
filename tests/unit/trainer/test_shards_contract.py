"""The shard contract: round trips in every dtype, safetensors interop, errors that name the field."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from synthetic_shards import HIDDEN, make_shard

from tide_contracts.shards import (
    FORMAT_NAME,
    ShardError,
    read_shard,
    read_shard_header,
    shard_to_bytes,
    write_shard,
)


@pytest.mark.parametrize(("dtype", "tol"), [("fp32", 0.0), ("fp16", 2e-3), ("bf16", 1e-2)])
def test_round_trip_keeps_arrays_and_metadata(tmp_path: Path, dtype: str, tol: float) -> None:
    shard = make_shard(0, dtype=dtype, with_last=True)
    path = tmp_path / "a.safetensors"
    write_shard(path, shard)
    back = read_shard(path)
    assert back.header == shard.header
    np.testing.assert_array_equal(back.token_ids, shard.token_ids)
    np.testing.assert_array_equal(back.labels, shard.labels)
    np.testing.assert_array_equal(back.request_offsets, shard.request_offsets)
    np.testing.assert_array_equal(back.loss_mask, shard.loss_mask)
    np.testing.assert_allclose(back.aux_hidden_states, shard.aux_hidden_states, rtol=tol, atol=tol)
    np.testing.assert_allclose(back.last_hidden_states, shard.last_hidden_states, rtol=tol, atol=tol)
    assert back.num_requests == 6
    assert back.request_rows(1) == slice(24, 48)


def test_bf16_matches_torch_rounding_and_loads_with_safetensors_torch(tmp_path: Path) -> None:
    shard = make_shard(1, dtype="bf16")
    path = tmp_path / "b.safetensors"
    write_shard(path, shard)
    tensors = load_file(str(path))
    assert tensors["aux_hidden_states"].dtype == torch.bfloat16
    expected = torch.from_numpy(shard.aux_hidden_states).to(torch.bfloat16)
    assert torch.equal(tensors["aux_hidden_states"], expected)  # round-to-nearest-even like torch
    assert torch.equal(tensors["token_ids"], torch.from_numpy(shard.token_ids))


def test_reads_a_shard_written_by_safetensors_torch(tmp_path: Path) -> None:
    """The serving plugin may write with torch; the contract is the file, not this writer."""
    shard = make_shard(2, dtype="bf16")
    header_len = struct.unpack("<Q", shard_to_bytes(shard)[:8])[0]
    metadata = json.loads(shard_to_bytes(shard)[8:8 + header_len])["__metadata__"]
    path = tmp_path / "torch.safetensors"
    save_file({"token_ids": torch.from_numpy(shard.token_ids),
               "aux_hidden_states": torch.from_numpy(shard.aux_hidden_states).to(torch.bfloat16),
               "labels": torch.from_numpy(shard.labels),
               "request_offsets": torch.from_numpy(shard.request_offsets)}, str(path), metadata=metadata)
    back = read_shard(path)
    assert back.header.format_version == 1
    assert back.loss_mask is None
    np.testing.assert_allclose(back.aux_hidden_states, shard.aux_hidden_states, rtol=1e-2, atol=1e-2)


def test_header_only_read() -> None:
    data = shard_to_bytes(make_shard(3))
    header = read_shard_header(data)
    assert header.hidden_size == HIDDEN
    assert len(header.requests) == 6


@pytest.mark.parametrize(("change", "field"), [
    ({"labels": np.zeros(5, dtype=np.int64)}, "labels"),
    ({"token_ids": np.zeros(144, dtype=np.int32)}, "token_ids"),
    ({"aux_hidden_states": np.zeros((144, 3, HIDDEN + 1), dtype=np.float32)}, "aux_hidden_states"),
    ({"aux_hidden_states": np.zeros((144, 2, HIDDEN), dtype=np.float32)}, "aux_hidden_states"),
    ({"request_offsets": np.array([0, 10, 144], dtype=np.int64)}, "request_offsets"),
    ({"request_offsets": np.array([0, 24, 24, 72, 96, 120, 144], dtype=np.int64)}, "request_offsets"),
    ({"loss_mask": np.ones(3, dtype=bool)}, "loss_mask"),
    ({"last_hidden_states": np.zeros((144, 7), dtype=np.float32)}, "last_hidden_states"),
])
def test_writer_rejects_bad_arrays_naming_the_field(change: dict[str, np.ndarray], field: str) -> None:
    bad = dataclasses.replace(make_shard(4), **change)
    with pytest.raises(ShardError, match=field):
        shard_to_bytes(bad)


@pytest.mark.parametrize(("header_change", "field"), [
    ({"dtype": "fp8"}, "dtype"), ({"aux_layer_ids": (1, 2)}, "aux_layer_ids"),
    ({"format_version": 9}, "format_version"), ({"hidden_size": 0}, "hidden_size"),
])
def test_writer_rejects_bad_header(header_change: dict[str, object], field: str) -> None:
    shard = make_shard(5)
    bad = dataclasses.replace(shard, header=dataclasses.replace(shard.header, **header_change))
    with pytest.raises(ShardError, match=field):
        shard_to_bytes(bad)


def test_reader_reports_corruption() -> None:
    data = shard_to_bytes(make_shard(6))
    with pytest.raises(ShardError, match="corrupt"):
        read_shard(data[:4])
    with pytest.raises(ShardError, match="corrupt"):
        read_shard(data[:-100])  # truncated body
    with pytest.raises(ShardError, match="corrupt"):
        read_shard(struct.pack("<Q", 12) + b"{not json!!}" + data[20:])
    with pytest.raises(ShardError, match="format"):
        read_shard(data.replace(FORMAT_NAME.encode(), b"x" * len(FORMAT_NAME)))


def test_reader_rejects_dtype_that_disagrees_with_metadata(tmp_path: Path) -> None:
    shard = make_shard(7, dtype="fp32")
    header_len = struct.unpack("<Q", shard_to_bytes(shard)[:8])[0]
    metadata = json.loads(shard_to_bytes(shard)[8:8 + header_len])["__metadata__"]
    metadata["dtype"] = "bf16"
    path = tmp_path / "lie.safetensors"
    save_file({"token_ids": torch.from_numpy(shard.token_ids),
               "aux_hidden_states": torch.from_numpy(shard.aux_hidden_states),
               "labels": torch.from_numpy(shard.labels),
               "request_offsets": torch.from_numpy(shard.request_offsets)}, str(path), metadata=metadata)
    with pytest.raises(ShardError, match="aux_hidden_states"):
        read_shard(path)


def test_reader_rejects_missing_tensor_and_metadata(tmp_path: Path) -> None:
    shard = make_shard(8)
    header_len = struct.unpack("<Q", shard_to_bytes(shard)[:8])[0]
    metadata = json.loads(shard_to_bytes(shard)[8:8 + header_len])["__metadata__"]
    path = tmp_path / "missing.safetensors"
    save_file({"token_ids": torch.from_numpy(shard.token_ids)}, str(path), metadata=metadata)
    with pytest.raises(ShardError, match="aux_hidden_states"):
        read_shard(path)
    del metadata["target_revision"]
    save_file({"token_ids": torch.from_numpy(shard.token_ids)}, str(path), metadata=metadata)
    with pytest.raises(ShardError, match="target_revision"):
        read_shard(path)


def test_reader_ignores_metadata_it_does_not_know(tmp_path: Path) -> None:
    """Room for additions within format version 1: extra keys, in the header and per request."""
    shard = make_shard(9)
    header_len = struct.unpack("<Q", shard_to_bytes(shard)[:8])[0]
    metadata = json.loads(shard_to_bytes(shard)[8:8 + header_len])["__metadata__"]
    metadata["capture_pod"] = "vllm-0"
    requests = json.loads(metadata["requests"])
    requests[0]["prompt_tokens"] = 32
    metadata["requests"] = json.dumps(requests)
    path = tmp_path / "newer.safetensors"
    save_file({"token_ids": torch.from_numpy(shard.token_ids),
               "aux_hidden_states": torch.from_numpy(shard.aux_hidden_states),
               "labels": torch.from_numpy(shard.labels),
               "request_offsets": torch.from_numpy(shard.request_offsets)}, str(path), metadata=metadata)
    assert read_shard(path).header.requests == shard.header.requests
