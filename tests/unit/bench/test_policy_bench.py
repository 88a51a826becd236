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
    assert [r[0] for r in overall] == ["steady", "load_ramp", "domain_shifts", "ALL"]
    assert all(len(r) == 2 + len(bench.POLICIES) for r in overall)


def test_targets_are_read_as_the_issue_words_them(bench) -> None:
    """Every phase against the better of no-spec and static; TIDE-adaptive and the oracle on the ALL row;
    a scenario's own OVERALL below TIDE-adaptive is reported, as stricter information."""
    def row(scenario: str, phase: str, **values: float) -> list:
        base = {"no-spec": 1.0, "static": 1.2, "tide-default": 1.1, "tide-adaptive": 1.3, "ours": 1.32,
                "oracle": 1.35, "ours-mpi30m": 1.3}
        return [scenario, phase, *({**base, **values}[p] for p in bench.POLICIES)]

    rows = [row("a", "p1"), row("a", "OVERALL", ours=1.29), row("b", "p1", ours=1.1), row("b", "OVERALL")]
    rows.append(bench.all_scenarios(rows))
    missed, stricter = bench.check_targets(rows)
    assert missed == ["b/p1: ours 1.100 < 0.98 x best(no-spec, static) 1.200"]
    assert stricter == ["a: ours 1.290 does not beat TIDE-adaptive 1.300"]
    assert rows[-1][2 + bench.POLICIES.index("ours")] == pytest.approx(1.305)


def test_no_speculation_is_the_unit_and_the_oracle_is_an_upper_bound(bench) -> None:
    cfg = bench.Config(yaml.safe_load(bench.DEFAULT_SCENARIOS.read_text()))
    rows = bench.run_scenario(cfg, "domain_shifts", cfg["scenarios"]["domain_shifts"], 0.1)
    col = {p: 2 + i for i, p in enumerate(bench.POLICIES)}
    for row in rows:
        assert row[col["no-spec"]] == pytest.approx(1.0)
        assert row[col["oracle"]] >= max(row[col["no-spec"]], row[col["static"]]) - 1e-9
