"""A trainer Job that asked for GPUs and sees none exits 8 (no_gpu) instead of training on CPU
(docs/contracts/trainer-cli.md); a CPU-only pool (TIDE_TRAINER_REQUIRE_GPU=0) trains on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tide_trainer.cli import REQUIRE_GPU_ENV, ExitCode, main, missing_gpu


def _run(tmp_path: Path, log: Path) -> int:
    (tmp_path / "empty").mkdir(exist_ok=True)
    return main(["train", "--shards", str(tmp_path / "empty"), "--target-revision", "r1",
                 "--target-model", str(tmp_path), "--work-dir", str(tmp_path / "w")])


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "termination-log"
    path.write_text("")
    monkeypatch.setenv("TIDE_TERMINATION_LOG", str(path))
    return path


def test_no_visible_gpu_exits_8_naming_it(tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_GPU_ENV, "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _run(tmp_path, log) == ExitCode.NO_GPU == 8
    summary = json.loads(log.read_text())
    assert summary["result"] == "no_gpu"
    assert "sees no GPU" in summary["error"]
    assert "ROCm" in summary["error"]
    assert not (tmp_path / "w").exists()  # nothing started


@pytest.mark.parametrize(("required", "visible"), [("1", True), ("0", False), (None, False)])
def test_a_visible_gpu_or_a_cpu_only_pool_proceeds(tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch,
                                                   required: str | None, visible: bool) -> None:
    if required is None:
        monkeypatch.delenv(REQUIRE_GPU_ENV, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_GPU_ENV, required)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible)
    assert missing_gpu() is None
    # Past the GPU check it reaches the input checks: no target config.json in tmp_path.
    assert _run(tmp_path, log) == ExitCode.INCOMPATIBLE
