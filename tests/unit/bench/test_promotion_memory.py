"""The promotion memory benchmark at 64 MiB (CI's size; 2 GiB is run by hand), multipart path included.

The benchmark's own --check is the assertion: the operator's promotion path stays under 100 MiB of
RSS above idle and the promoted draft holds every candidate file. The threshold is set so the
multipart copy runs, and the part count it reports is the one copy_ranges plans.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tide_contracts.draft_copy import copy_ranges

BENCH = Path(__file__).resolve().parents[3] / "bench" / "promotion_memory.py"
SIZE_MIB, THRESHOLD_MIB = 64, 8


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("promotion_memory", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["promotion_memory"] = module
    spec.loader.exec_module(module)
    return module


def test_promoting_64_mib_stays_under_the_target_through_the_multipart_path(
    bench, capsys: pytest.CaptureFixture[str]
) -> None:
    code = bench.main(["--size-mib", str(SIZE_MIB), "--multipart-threshold-mib", str(THRESHOLD_MIB), "--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    parts = len(copy_ranges(SIZE_MIB * 2**20, THRESHOLD_MIB * 2**20))
    assert re.search(rf"\b{parts} UploadPartCopy\b", out), out
    assert "draft intact: True" in out
    peak = float(re.search(r"PEAK_RSS_ABOVE_IDLE_MIB ([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    assert peak < bench.TARGET_MIB
