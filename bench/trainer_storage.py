"""Storage: bytes per captured token (per layer, per dtype) and the rolling buffer's bound vs keeping all.

Measured by writing real shards with the contract writer (tide_contracts.shards) and dividing file
sizes by rows, so container overhead (header, ids, labels, mask) is included.

Run: .venv/bin/python bench/trainer_storage.py [--hidden 128] [--stream-shards 100000]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from tide_contracts.shards import HiddenStateShard, RequestMeta, ShardHeader, write_shard

ROWS_PER_REQUEST = 128


def shard_bytes(hidden: int, dtype: str, requests: int, with_last: bool, root: Path) -> int:
    rows = requests * ROWS_PER_REQUEST
    rng = np.random.default_rng(0)
    aux = rng.normal(size=(rows, 3, hidden)).astype(np.float32)
    header = ShardHeader(target_revision="r", tokenizer_hash="0" * 64, aux_layer_ids=(1, 2, 3), hidden_size=hidden,
                         dtype=dtype, requests=tuple(RequestMeta(f"req-{i:08d}", "r", "v1", 0.5)
                                                     for i in range(requests)))
    shard = HiddenStateShard(
        header=header, token_ids=np.zeros(rows, np.int64), aux_hidden_states=aux, labels=np.zeros(rows, np.int64),
        request_offsets=np.arange(0, rows + 1, ROWS_PER_REQUEST, dtype=np.int64),
        loss_mask=np.ones(rows, bool), last_hidden_states=aux[:, 2].copy() if with_last else None)
    return write_shard(root / f"{hidden}-{dtype}-{with_last}.safetensors", shard)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests-per-shard", type=int, default=16)
    parser.add_argument("--window-shards", type=int, default=4096)
    parser.add_argument("--stream-shards", type=int, default=100_000)
    args = parser.parse_args()
    rows = args.requests_per_shard * ROWS_PER_REQUEST
    print(f"bytes per captured token ({rows} rows per shard, container overhead included)")
    print(f"{'H':>6} {'dtype':>5} {'3 layers':>9} {'per layer':>9} {'+last':>9}  {'state only (3*H*bytes)':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        for hidden in (128, 2880, 8192):  # tiny target, gpt-oss-120b, Llama-3.3-70B
            for dtype, width in (("bf16", 2), ("fp16", 2), ("fp32", 4)):
                base = shard_bytes(hidden, dtype, args.requests_per_shard, False, Path(tmp)) / rows
                full = shard_bytes(hidden, dtype, args.requests_per_shard, True, Path(tmp)) / rows
                print(f"{hidden:>6} {dtype:>5} {base:>9.1f} {base / 3:>9.1f} {full:>9.1f}  {3 * hidden * width:>22}")
    shard_mb = shard_bytes(2880, "bf16", args.requests_per_shard, False, Path(tempfile.mkdtemp())) / 1e6
    bound, everything = args.window_shards * shard_mb, args.stream_shards * shard_mb
    print(f"\nrolling buffer (gpt-oss-120b size, bf16): newest {args.window_shards} shards = {bound / 1e3:.1f} GB;"
          f" keeping all {args.stream_shards} shards = {everything / 1e3:.1f} GB; ratio {everything / bound:.1f}x")


if __name__ == "__main__":
    main()
