"""The kind e2e tier: e2e/kind/run.sh (chart, fake GPU pools, CPU vLLM, S3, Prometheus on kind).

Opt-in and slow (15-30 minutes, most of it building images the first time): it runs only where a
Docker engine answers, kind, helm and kubectl are installed, and TIDE_KIND_E2E=1 is set; everywhere
else it is skipped with the reason. docs/kind-e2e.md describes what it does and asserts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.kind

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "e2e" / "kind" / "run.sh"


def docker_engine_answers() -> bool:
    # The docker CLI alone is not enough: `docker info` needs the daemon (absent on the CI machines).
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], check=False, capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def why_not_runnable() -> str | None:
    if not docker_engine_answers():
        return "no Docker engine: kind needs one"
    missing = [tool for tool in ("kind", "helm", "kubectl") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (see docs/kind-e2e.md)"
    if os.environ.get("TIDE_KIND_E2E") != "1":
        return "opt-in: set TIDE_KIND_E2E=1 to run the kind e2e (15-30 minutes)"
    return None


@pytest.mark.timeout(3600)
def test_chart_on_kind_serves_and_speculates() -> None:
    reason = why_not_runnable()
    if reason:
        pytest.skip(reason)
    result = subprocess.run(["bash", str(RUN)], check=False, cwd=REPO, timeout=3500)
    assert result.returncode == 0, f"{RUN.relative_to(REPO)} failed (exit {result.returncode}); its output says why"
