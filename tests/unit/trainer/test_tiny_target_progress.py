"""The tiny models' minutes-long builds print progress: a line at least every TIDE_HEARTBEAT_SECONDS with the
step, the share done and the loss, so `make demo` on a cold machine never sits silent (issue 19)."""

from __future__ import annotations

import itertools
import logging
import re
from pathlib import Path

import pytest

from tide_trainer.tiny_target.build import BuildSettings, build, load_tiny_target
from tide_trainer.tiny_target.capture import CaptureSettings, write_domain_shards
from tide_trainer.tiny_target.progress import Progress, heartbeat_seconds


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_reports_first_last_and_whenever_the_interval_passed() -> None:
    clock, lines = FakeClock(), []
    progress = Progress("tiny target step", total=100, every_s=10.0, clock=clock, emit=lines.append)
    times = []
    for done in range(1, 101):
        clock.now += 0.7  # a step takes 0.7 s
        if progress.due(done):
            progress.report(done, f"loss {1.0 / done:.3f}")
            times.append(clock.now)
    assert lines[0] == "tiny target step 1/100 (1%) loss 1.000, 1s elapsed, eta 69s"
    assert lines[-1].startswith("tiny target step 100/100 (100%) loss 0.010, 70s elapsed")
    assert max(b - a for a, b in itertools.pairwise(times)) <= 10.0 + 0.7  # the interval plus one step
    assert 7 <= len(lines) <= 9  # not every step either
    assert re.search(r", eta \d+s$", lines[1]), lines  # once a rate is known, the time left


def test_heartbeat_seconds_reads_the_environment_and_refuses_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDE_HEARTBEAT_SECONDS", raising=False)
    assert heartbeat_seconds() == 20.0
    monkeypatch.setenv("TIDE_HEARTBEAT_SECONDS", "1.5")
    assert heartbeat_seconds() == 1.5
    for bad in ("soon", "-1"):
        monkeypatch.setenv("TIDE_HEARTBEAT_SECONDS", bad)
        with pytest.raises(ValueError, match="TIDE_HEARTBEAT_SECONDS"):
            heartbeat_seconds()


def test_the_tiny_target_build_and_its_capture_log_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TIDE_HEARTBEAT_SECONDS", "0")  # every step is due: the lines themselves are checked
    with caplog.at_level(logging.INFO, logger="tide_trainer.tiny_target"):
        build(tmp_path, BuildSettings(steps=3, batch_size=4, seq_len=32, warmup=1))
    steps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tiny target step")]
    assert [m.split(" (")[0] for m in steps] == [f"tiny target step {i}/3" for i in (1, 2, 3)], steps
    assert all(re.search(r"\(\d+%\) loss \d+\.\d{3}, \d+s elapsed", m) for m in steps), steps

    caplog.clear()
    model, tok, info = load_tiny_target(tmp_path)
    with caplog.at_level(logging.INFO, logger="tide_trainer.tiny_target"):
        write_domain_shards(model, tok, info, domain="code", out_dir=tmp_path / "shards", shards=2,
                            settings=CaptureSettings(requests_per_shard=2, new_tokens=4))
    # Only the tiny target's own lines: a daemon thread another test left behind may log meanwhile.
    shards = [r.getMessage() for r in caplog.records if r.name.startswith("tide_trainer.tiny_target")]
    assert [m.split(",")[0] for m in shards] == ["captured code shard 1/2 (50%)", "captured code shard 2/2 (100%)"]
