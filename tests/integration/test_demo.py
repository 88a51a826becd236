"""README's main command works: the demo runs end to end and leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_the_operator_story_and_cleans_up():
    done = subprocess.run([sys.executable, "-m", "tide_e2e.demo", "--fast"], capture_output=True, text=True,
                          timeout=400, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for line in ("phase=Serving inference=H100 ready=2/2 training=MI250", "Service restored",
                 "4 requests running: speculation ON", "256 requests running: speculation OFF",
                 "Ready=False: spec.inference.gpuClasses: unknown GPU class 'TPU-v5'",
                 "vLLM Deployment untouched: True", "Everything stopped and removed."):
        assert line in out
