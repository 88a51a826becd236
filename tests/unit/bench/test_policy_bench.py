"""The policy benchmark runs end to end on shortened scenarios and its numbers are sane."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parents[3] / "bench" / "policy_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("policy_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["policy_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_bench_prints_every_policy_for_every_phase(bench, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--minutes-scale", "0.1"]) == 0
    out = capsys.readouterr().out
    for policy in bench.POLICIES:
        assert policy in out
    rows = [line.split() for line in out.splitlines()]
    overall = [r for r in rows if r[1:2] == ["OVERALL"]]
    assert len(overall) == 3
    assert all(len(r) == 2 + len(bench.POLICIES) for r in overall)


def test_no_speculation_is_the_unit_and_the_oracle_is_an_upper_bound(bench) -> None:
    cfg = bench.Config(yaml.safe_load(bench.DEFAULT_SCENARIOS.read_text()))
    rows = bench.run_scenario(cfg, "domain_shifts", cfg["scenarios"]["domain_shifts"], 0.1)
    col = {p: 2 + i for i, p in enumerate(bench.POLICIES)}
    for row in rows:
        assert row[col["no-spec"]] == pytest.approx(1.0)
        assert row[col["oracle"]] >= max(row[col["no-spec"]], row[col["static"]]) - 1e-9
