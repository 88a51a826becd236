"""Pinned numerics, so the tiny models are the same files on every x86-64 machine with this torch.

Two CPUs run different float kernels by default: MKL and ATen pick code paths by instruction set
(AVX2 here, AVX-512 on most Intel servers), and parallel reductions split their sums by thread count.
Each changes the rounding of every training step, and a thousand steps turn ulps into another model
(CI once judged a draft 1.94 offline on one machine and 1.54 on another). So a build runs in a child
process whose environment fixes MKL's code branch (its conditional numerical reproducibility, strict),
ATen's kernel level and the thread count before torch loads, with deterministic algorithms on. The
files it writes are checked against checksums recorded in the repository (checksums.json).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path

from tide_trainer.candidate import sha256_file

log = logging.getLogger(__name__)

THREADS = 2
PINNED_ENV = {
    "MKL_CBWR": "AVX2,STRICT",  # MKL's AVX2 branch on every CPU that has it, AMD and Intel alike
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's AVX2 kernels even where AVX-512 exists
    "OMP_NUM_THREADS": str(THREADS),
    "MKL_NUM_THREADS": str(THREADS),
    "RAYON_NUM_THREADS": "1",  # the tokenizer trainer's thread pool
    "TOKENIZERS_PARALLELISM": "false",
}
CHECKSUMS_FILE = Path(__file__).with_name("checksums.json")


class ChecksumMismatch(RuntimeError):
    """A pinned build produced other files than the repository records for this platform."""


def platform_key() -> str:
    import torch  # late: a parent that only starts the child need not load torch

    return f"{platform.machine()}-torch-{torch.__version__}"


def expected_checksum(artifact: str) -> str | None:
    """The recorded sha256 of an artifact (e.g. 'tiny-llama-v2/model.safetensors') on this platform."""
    recorded = json.loads(CHECKSUMS_FILE.read_text())
    return recorded.get(platform_key(), {}).get(artifact)


def verify(path: Path, artifact: str) -> str:
    """The file's sha256; raises ChecksumMismatch when the repository records another one."""
    actual, expected = sha256_file(path), expected_checksum(artifact)
    if expected is None:
        log.warning("%s: no checksum recorded for %s; built %s (not comparable across machines)",
                    artifact, platform_key(), actual)
    elif actual != expected:
        raise ChecksumMismatch(
            f"{artifact}: built sha256 {actual}, the repository records {expected} for {platform_key()} "
            f"({CHECKSUMS_FILE.name}); the pinned build is not reproducible on this CPU")
    return actual


def is_pinned() -> bool:
    return all(os.environ.get(key) == value for key, value in PINNED_ENV.items())


def pin_torch() -> None:
    """In the child: fail loudly if the environment was not pinned before torch loaded."""
    import torch

    if not is_pinned():
        raise RuntimeError("tiny model builds run through pinned_run(): the numeric environment is not pinned")
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)


def pinned_run(args: list[str]) -> None:
    """Run `python -m tide_trainer.tiny_target ARGS` in a child with pinned numerics."""
    subprocess.run([sys.executable, "-m", "tide_trainer.tiny_target", *args],
                   env={**os.environ, **PINNED_ENV}, check=True)
