"""Prepared check for a GPU machine: the serving plugin on vLLM's Model Runner V2 (GPU default in 0.33.0).

Not run yet: the CPU backend only runs the V1 runner, and the project's GPU time was not available
when this was written. Run on a CUDA machine with vLLM (e.g. the serving image) and this repo:

    pip install -e ".[serving,dev]"          # or use images/serving.Dockerfile
    python bench/serving_gpu_check.py        # ~3-5 minutes; exit 0 = every real-engine test passed

It runs the same real-engine tests as CPU CI (tests/engine: completions + metrics, capture of served
tokens in the shard format, hot swap under load, refused drafts, S3 load, speculation switch,
promoted draft at startup) with the V2 runner and the async scheduler variant, the engine gate
opened (TIDE_ALLOW_UNTESTED_VLLM=1), and then checks that the V2 runner really served. When it
passes, add the version/runner pair to tide_serving.engine_support.TESTED.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("serving_gpu_check: no CUDA device here; run this on a GPU machine", file=sys.stderr)
        return 2
    env = {**os.environ, "TIDE_VLLM_TESTS": "1", "TIDE_ALLOW_UNTESTED_VLLM": "1",
           "VLLM_USE_V2_MODEL_RUNNER": "1", "TIDE_EXPECT_RUNNER": "v2",
           "TIDE_TEST_SCHEDULER": "tide_serving.scheduler.SpeculationSwitchAsyncScheduler"}
    tests = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "tests" / "engine"), "-m", "vllm",
                            "-x", "-v", "-p", "no:cacheprovider"], env=env, cwd=ROOT, check=False)
    if tests.returncode != 0:
        return tests.returncode
    print("serving_gpu_check: all real-engine tests passed on the V2 runner; record the vLLM version "
          "in tide_serving.engine_support.TESTED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
