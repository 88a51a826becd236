"""A test can shift every simulated pod at once by rewriting the scenario file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tide_vllm_sim.server import ScenarioWatcher, run_ticker


def _write(path: Path, data: dict[str, Any], stamp: int) -> None:
    path.write_text(yaml.safe_dump(data))
    os.utime(path, ns=(stamp, stamp))  # explicit mtimes: coarse filesystem clocks cannot hide an edit


def test_watcher_reloads_on_change_and_keeps_the_old_on_a_bad_edit(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    _write(path, {"default_domain": "general"}, 1_000_000_000)
    watcher = ScenarioWatcher(str(path), seed=4)
    assert watcher.changed() is None
    _write(path, {"default_domain": "korean"}, 2_000_000_000)
    reloaded = watcher.changed()
    assert reloaded is not None
    assert (reloaded.default_domain, reloaded.seed) == ("korean", 4)
    assert watcher.changed() is None
    _write(path, {"default_acceptance": 7}, 3_000_000_000)
    assert watcher.changed() is None
    assert "not reloaded" in capsys.readouterr().err
    assert ScenarioWatcher(None, None).changed() is None


def test_the_ticker_applies_a_rewritten_scenario(start_sim: Any, scenario_file: Path) -> None:
    sim = start_sim()
    watcher = ScenarioWatcher(str(scenario_file), None)
    stop = threading.Event()
    ticker = threading.Thread(target=run_ticker, args=(sim.pod, stop, watcher), daemon=True)
    ticker.start()
    try:
        data = yaml.safe_load(scenario_file.read_text())
        data["timeline"] = [{"at_s": 0, "domain": "korean", "background_running": 5}]
        _write(scenario_file, data, time.time_ns() + 10**9)
        deadline = time.monotonic() + 5
        while sim.pod.engine.running_and_waiting()[0] != 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sim.pod.engine.running_and_waiting() == (5, 0)
        while sim.pod.engine.counters.spec.drafts < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        drafts, _, _, per_position = sim.pod.engine.counters.spec.exposed()
        assert per_position[0] / drafts == pytest.approx(0.3, abs=0.02)  # the initial draft on korean
    finally:
        stop.set()
        ticker.join()
