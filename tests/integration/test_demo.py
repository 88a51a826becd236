"""README's fast demo works: the operator story and the simulated loop run end to end, nothing left behind."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_the_operator_story_and_cleans_up():
    done = subprocess.run([sys.executable, "-m", "tide_e2e.demo", "--fast"], capture_output=True, text=True,
                          timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for line in ("phase=Serving inference=H100 ready=2/2 training=MI250", "Service restored",
                 "4 requests running: speculation ON", "256 requests running: speculation OFF",
                 "Ready=False: spec.inference.gpuClasses: unknown GPU class 'TPU-v5'",
                 "vLLM Deployment untouched: True", "Everything stopped and removed."):
        assert line in out
    # Run ids are <hash of the TideDeployment's UID>-r<counter>.
    assert re.search(r"trainer Job chat-train-[0-9a-f]{8}-r1: succeeded=1", out), out
    assert re.search(r"promoted\.json -> v1 \(run [0-9a-f]{8}-r1\)", out), out
