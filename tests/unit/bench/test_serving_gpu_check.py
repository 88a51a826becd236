"""bench/serving_gpu_check.py runs the real-engine tests that exist (tests/engine), with the V2 runner."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _load():
    spec = importlib.util.spec_from_file_location("serving_gpu_check", ROOT / "bench" / "serving_gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_check_runs_the_engine_tests_folder_with_the_v2_runner(monkeypatch):
    torch = __import__("torch")
    module = _load()
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append((args, kw)) or
                        subprocess.CompletedProcess(args, 0))
    assert module.main() == 0
    (args, kw), = calls
    folder = Path(args[args.index("pytest") + 1])
    assert args[:3] == [sys.executable, "-m", "pytest"]
    assert args[args.index("-m", 3) + 1] == "vllm"
    assert any(folder.glob("test_*.py"))  # a folder that exists and holds the tests
    assert kw["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_without_a_gpu_it_refuses_and_says_where_to_run(monkeypatch, capsys):
    torch = __import__("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _load().main() == 2
    assert "GPU machine" in capsys.readouterr().err
