"""torchrun with two CPU processes on gloo trains the same draft as one process with the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from synthetic_shards import REVISION

ARGS = ["--target-revision", REVISION, "--ttt-steps", "2", "--epochs", "1", "--max-steps", "4",
        "--lr", "0.01", "--eval-fraction", "0.3", "--max-seq-len", "8", "--speculative-tokens", "2",
        "--log-every", "1"]


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


def test_two_gloo_processes_match_one(tmp_path: Path, shard_dir: Path, parent_dir: Path) -> None:
    common = ["train", "--shards", str(shard_dir), "--parent-draft", str(parent_dir), *ARGS]
    single = _run([sys.executable, "-m", "tide_trainer", *common, "--batch-size", "4",
                   "--work-dir", str(tmp_path / "one")], tmp_path)
    assert single.returncode == 0, single.stdout + single.stderr
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    double = _run([*torchrun, "-m", "tide_trainer", *common, "--batch-size", "2",
                   "--work-dir", str(tmp_path / "two")], tmp_path)
    assert double.returncode == 0, double.stdout + double.stderr
    assert "step 4/4" in single.stdout
    assert "step 4/4" in double.stdout
    one = load_file(str(tmp_path / "one" / "candidate" / "model.safetensors"))
    two = load_file(str(tmp_path / "two" / "candidate" / "model.safetensors"))
    parent = load_file(str(parent_dir / "model.safetensors"))
    assert not torch.allclose(one["fc.weight"], parent["fc.weight"])  # it did train
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, rtol=1e-4, atol=1e-5)
