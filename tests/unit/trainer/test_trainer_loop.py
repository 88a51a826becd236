"""Training resumes exactly from a checkpoint, the split is stable by request, and a fresh draft is built
from the target's config and embedding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from synthetic_shards import REVISION, make_shard

from tide_trainer.config import TrainConfig
from tide_trainer.data import is_eval_request, split_samples
from tide_trainer.export import load_speculators
from tide_trainer.starting_point import (
    IncompatibleDraftError,
    fetch_target,
    fresh_draft,
    most_frequent_targets,
    target_draft_config,
)
from tide_trainer.train import CHECKPOINT_FILE, fit


def _cfg(work: Path, parent: Path, **kw: object) -> TrainConfig:
    base = {"shards": "unused", "target_revision": REVISION, "parent_draft": str(parent),
            "work_dir": str(work),
            "ttt_steps": 2, "lr": 0.01, "batch_size": 4, "epochs": 3, "checkpoint_every": 2}
    base.update(kw)
    return TrainConfig.model_validate(base)


def test_resume_continues_exactly(tmp_path: Path, parent_dir: Path) -> None:
    train, _ = split_samples([make_shard(0), make_shard(1, first_request=50)], 0.2, 16)
    straight = load_speculators(parent_dir)
    fit(straight, train, _cfg(tmp_path / "a", parent_dir))

    interrupted = load_speculators(parent_dir)
    first = fit(interrupted, train, _cfg(tmp_path / "b", parent_dir, max_steps=5))
    assert first.steps == 5
    assert (tmp_path / "b" / CHECKPOINT_FILE).exists()
    resumed = load_speculators(parent_dir)  # a new process: weights come from the checkpoint
    second = fit(resumed, train, _cfg(tmp_path / "b", parent_dir))
    assert second.steps == straight_steps(train)
    for name, tensor in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], tensor, rtol=1e-5, atol=1e-6)


def straight_steps(train: list[object]) -> int:
    return 3 * -(-len(train) // 4)


def test_split_is_by_request_and_stable() -> None:
    shards = [make_shard(0, requests=20)]
    train, held_out = split_samples(shards, 0.3, 8)
    train_ids = {s.request.request_id for s in train}
    eval_ids = {s.request.request_id for s in held_out}
    assert not train_ids & eval_ids
    assert len(train_ids | eval_ids) == 20
    assert eval_ids == {f"req-{r}" for r in range(20) if is_eval_request(f"req-{r}", 0.3)}
    assert all(s.labels.shape[0] <= 8 for s in train)  # long requests are cut into slices


def _target_dir(tmp_path: Path) -> Path:
    """A stand-in HF Llama target: config plus the tensors a fresh draft copies."""
    root = tmp_path / "target"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({
        "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "rms_norm_eps": 1e-5}))
    torch.manual_seed(3)
    save_file({"model.embed_tokens.weight": torch.randn(64, 32), "lm_head.weight": torch.randn(64, 32),
               "model.norm.weight": torch.rand(32)}, str(root / "model.safetensors"))
    return root


def test_fresh_draft_from_target_with_reduced_vocab(tmp_path: Path) -> None:
    target = _target_dir(tmp_path)
    cfg = target_draft_config(target, None, 8)
    assert cfg.aux_layer_ids == [1, 2, 3]
    train, _ = split_samples([make_shard(0)], 0.2, 32)
    model = fresh_draft(target, cfg, train, seed=0)
    kept = most_frequent_targets(train, 8)
    assert torch.equal(model.draft_to_target(torch.arange(8)), kept)
    weights = load_file(str(target / "model.safetensors"))
    assert torch.equal(model.embed_tokens.weight, weights["model.embed_tokens.weight"])
    assert torch.equal(model.lm_head.weight, weights["lm_head.weight"][kept])
    assert not model.embed_tokens.weight.requires_grad


def test_target_model_from_s3(tmp_path: Path, s3: object) -> None:
    target = _target_dir(tmp_path)
    bucket = "tide-target"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    for name in ("config.json", "model.safetensors"):
        s3.put_object(Bucket=bucket, Key=f"models/tiny/{name}", Body=(target / name).read_bytes())  # type: ignore[attr-defined]
    local = fetch_target(f"s3://{bucket}/models/tiny", tmp_path / "work")
    assert target_draft_config(local, None, None) == target_draft_config(target, None, None)
    with pytest.raises(IncompatibleDraftError, match="target_model"):
        fetch_target(str(tmp_path / "nowhere"), tmp_path / "work")
