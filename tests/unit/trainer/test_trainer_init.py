"""`tide_trainer init`: a fresh head shaped after the target, written like a candidate (manifest last), kept
on a retry for the same revision, never overwritten for another, and loadable as a parent by `train`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tide_contracts.registry import Manifest
from tide_trainer.cli import ExitCode, main
from tide_trainer.export import load_speculators

REVISION = "rev-a"
HIDDEN, VOCAB, LAYERS = 32, 64, 4


def write_target(out: Path) -> Path:
    """The parts of an HF Llama target a fresh head reads: config, embedding, final norm, LM head."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": HIDDEN, "vocab_size": VOCAB, "num_hidden_layers": LAYERS,
        "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}))
    gen = torch.Generator().manual_seed(3)
    save_file({"model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=gen),
               "model.norm.weight": torch.ones(HIDDEN), "lm_head.weight": torch.randn(VOCAB, HIDDEN, generator=gen)},
              str(out / "model.safetensors"))
    return out


def _init(target: Path | str, output: str, work: Path, *extra: str) -> int:
    return main(["init", "--target-model", str(target), "--target-revision", REVISION, "--output", output,
                 "--work-dir", str(work), *extra])


def test_local_head_has_the_targets_shape_and_tensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = write_target(tmp_path / "target")
    out = tmp_path / "head"
    assert _init(target, str(out), tmp_path / "work", "--speculative-tokens", "2") == ExitCode.OK
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]  # [1, L/2, L-1]
    assert (config["target_hidden_size"], config["draft_vocab_size"]) == (HIDDEN, VOCAB)
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 2
    weights, target_weights = load_file(str(out / "model.safetensors")), load_file(str(target / "model.safetensors"))
    assert torch.equal(weights["lm_head.weight"], target_weights["lm_head.weight"])
    assert torch.equal(weights["embed_tokens.weight"], target_weights["model.embed_tokens.weight"])
    assert "d2t" not in weights  # full vocabulary: nothing to map
    manifest = Manifest.model_validate_json((out / "manifest.json").read_text())
    assert (manifest.kind, manifest.run_id, manifest.target_revision) == ("bootstrap", "bootstrap", REVISION)
    assert set(manifest.files) == {"config.json", "model.safetensors"}
    assert load_speculators(out).cfg.aux_layer_ids == [1, 2, 3]  # `train` can warm-start from it
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["result"], summary["created"]) == ("ok", True)


def test_s3_head_is_written_manifest_last_and_kept_on_a_retry(tmp_path: Path, s3: object) -> None:
    bucket = "init-head"  # the suite shares one S3 server: a bucket no other test writes
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    target = write_target(tmp_path / "target")
    output = f"s3://{bucket}/ns/chat/bootstrap/abc"
    assert _init(target, output, tmp_path / "w1") == ExitCode.OK
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])  # type: ignore[attr-defined]
    assert keys == [f"ns/chat/bootstrap/abc/{n}" for n in ("config.json", "manifest.json", "model.safetensors")]
    first = s3.get_object(Bucket=bucket, Key="ns/chat/bootstrap/abc/model.safetensors")["ETag"]  # type: ignore[attr-defined]
    # A retried Job (same revision) keeps the head: no second upload, even with another seed.
    assert _init(target, output, tmp_path / "w2", "--seed", "9") == ExitCode.OK
    again = s3.get_object(Bucket=bucket, Key="ns/chat/bootstrap/abc/model.safetensors")["ETag"]  # type: ignore[attr-defined]
    assert again == first
    # Another revision at the same place is refused (exit 6), the head stays.
    assert main(["init", "--target-model", str(target), "--target-revision", "rev-b", "--output", output,
                 "--work-dir", str(tmp_path / "w3")]) == ExitCode.STORAGE


@pytest.mark.parametrize(("args", "code"), [
    (["--aux-layer-ids", "1,2,9"], ExitCode.INCOMPATIBLE),  # beyond the target's layers
    (["--speculative-tokens", "0"], ExitCode.BAD_CONFIG),
    (["--shards", "x"], ExitCode.BAD_CONFIG),  # a train flag
])
def test_bad_input_exits_with_its_code(tmp_path: Path, args: list[str], code: ExitCode) -> None:
    target = write_target(tmp_path / "target")
    assert _init(target, str(tmp_path / "head"), tmp_path / "work", *args) == code
    assert not (tmp_path / "head" / "manifest.json").exists()


def test_unreadable_target_is_incompatible(tmp_path: Path) -> None:
    assert _init(tmp_path / "missing", str(tmp_path / "head"), tmp_path / "work") == ExitCode.INCOMPATIBLE
