from __future__ import annotations

from pathlib import Path

import pytest
import torch
from synthetic_shards import tiny_draft_config, write_buffer

from tide_trainer.export import export_speculators
from tide_trainer.model import Eagle3Draft


@pytest.fixture
def shard_dir(tmp_path: Path) -> Path:
    return write_buffer(tmp_path / "shards")


@pytest.fixture
def parent_dir(tmp_path: Path) -> Path:
    """An untrained served draft (speculators format) to warm-start from."""
    torch.manual_seed(7)
    return export_speculators(Eagle3Draft(tiny_draft_config()), tmp_path / "parent", verifier="synthetic",
                              speculative_tokens=3)[0].parent


