from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "charts" / "tide-operator" / "files" / "alerts" / "tide-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")


@needs_promtool
def test_rules_pass_promtool_check() -> None:
    run = subprocess.run([PROMTOOL, "check", "rules", str(RULES)],
                         check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_rules_pass_their_promtool_unit_tests() -> None:
    run = subprocess.run([PROMTOOL, "test", "rules", str(UNIT_TESTS)],
                         check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_has_a_unit_test_and_a_severity() -> None:
    alerts = {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tested = {c["alertname"] for t in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for c in t["alert_rule_test"]}
    assert set(alerts) <= tested
    assert all(rule["labels"]["severity"] in {"info", "warning", "critical"} for rule in alerts.values())
