"""The Job entrypoint end to end on tiny shards: a better candidate is exported, every bad input exits with
its documented code and leaves nothing in the registry."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from synthetic_shards import REVISION, make_shard, write_buffer

from tide_contracts.registry import DraftRegistry, Manifest
from tide_contracts.shards import shard_to_bytes, write_shard
from tide_contracts.signature import PROJECTION, SIGNATURE_DIMENSIONS
from tide_trainer.cli import ExitCode, main

FAST = ["--ttt-steps", "2", "--epochs", "8", "--lr", "0.01", "--batch-size", "4", "--eval-fraction", "0.3",
        "--log-every", "5", "--speculative-tokens", "2"]


def _train(tmp_path: Path, shards: str, parent: Path | str, *extra: str) -> int:
    return main(["train", "--shards", shards, "--parent-draft", str(parent), "--target-revision", REVISION,
                 "--work-dir", str(tmp_path / "work"), *FAST, *extra])


def test_trains_a_better_draft_and_reports(tmp_path: Path, shard_dir: Path, parent_dir: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    assert _train(tmp_path, str(shard_dir), parent_dir, "--tokenizer-hash", "tok-hash") == ExitCode.OK
    report = json.loads((tmp_path / "work" / "eval.json").read_text())
    decision = report["decision"]
    assert decision["baseline"] == "parent_draft"
    assert decision["better"]
    assert decision["candidate_acceptance_length"] > decision["baseline_acceptance_length"] + 0.3
    assert report["samples"]["eval_requests"] > 0
    assert report["samples"]["train_requests"] > 0
    assert report["served"]["acceptance_length"] == pytest.approx(1 + 2 * 0.3)
    assert len(report["candidate"]["top1_agreement_per_position"]) == 2
    assert (tmp_path / "work" / "candidate" / "model.safetensors").exists()
    assert "tok/s" in caplog.text
    assert "eta" in caplog.text
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["result"] == "ok"
    assert summary["candidate"] is None


def test_config_file_and_flag_override(tmp_path: Path, shard_dir: Path, parent_dir: Path) -> None:
    config = tmp_path / "train.yaml"
    config.write_text(f"shards: {shard_dir}\nparent_draft: {parent_dir}\ntarget_revision: {REVISION}\n"
                      f"work_dir: {tmp_path / 'work'}\nmin_improvement: 100\n")
    assert main(["train", "--config", str(config), *FAST]) == ExitCode.NOT_BETTER
    assert main(["train", "--config", str(config), *FAST, "--min-improvement", "0"]) == ExitCode.OK


@pytest.mark.parametrize("args", [
    ["--epochs", "0"], ["--precision", "fp64"], ["--run-id", "../escape"], ["--shards"],
    ["--registry", "/tmp/not-s3"], ["--eval-fraction", "1.5"], ["--no-such-key", "1"],
])
def test_bad_config_exits_2(tmp_path: Path, shard_dir: Path, parent_dir: Path, args: list[str]) -> None:
    if args == ["--shards"]:  # no parent and no target: nothing to build a draft from
        code = main(["train", "--shards", str(shard_dir), "--target-revision", REVISION])
    else:
        code = _train(tmp_path, str(shard_dir), parent_dir, *args)
    assert code == ExitCode.BAD_CONFIG


def test_missing_or_unknown_config_exits_2(tmp_path: Path, shard_dir: Path) -> None:
    assert main(["train", "--config", str(tmp_path / "nope.yaml")]) == ExitCode.BAD_CONFIG
    config = tmp_path / "train.json"
    config.write_text(json.dumps({"shards": str(shard_dir), "target_revision": REVISION, "target_model": "/x",
                                  "learning_rate": 0.1}))  # a typo for lr must not be ignored
    assert main(["train", "--config", str(config)]) == ExitCode.BAD_CONFIG
    assert main(["bogus"]) == ExitCode.BAD_CONFIG


def test_empty_buffer_exits_3(tmp_path: Path, parent_dir: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert _train(tmp_path, str(tmp_path / "empty"), parent_dir) == ExitCode.NO_DATA


def test_corrupt_shard_exits_4(tmp_path: Path, shard_dir: Path, parent_dir: Path) -> None:
    data = shard_to_bytes(make_shard(9))
    (shard_dir / "zz-corrupt.safetensors").write_bytes(data[: len(data) // 2])
    assert _train(tmp_path, str(shard_dir), parent_dir) == ExitCode.BAD_DATA


@pytest.mark.parametrize(("shard_kwargs", "extra"), [
    ({"revision": "rev-b"}, []),  # captured from another target revision
    ({"hidden": 48}, []),  # hidden size does not match the draft
    ({}, ["--tokenizer-hash", "other"]),
])
def test_incompatible_shards_exit_5(tmp_path: Path, parent_dir: Path, shard_kwargs: dict[str, object],
                                    extra: list[str]) -> None:
    root = write_buffer(tmp_path / "shards", **shard_kwargs)
    assert _train(tmp_path, str(root), parent_dir, *extra) == ExitCode.INCOMPATIBLE


def test_missing_target_model_exits_5(tmp_path: Path, shard_dir: Path) -> None:
    code = main(["train", "--shards", str(shard_dir), "--target-model", "meta-llama/Llama-3.1-8B",
                 "--target-revision", REVISION, "--work-dir", str(tmp_path / "w")])
    assert code == ExitCode.INCOMPATIBLE


def test_layer_ids_mismatch_exits_5(tmp_path: Path, shard_dir: Path, parent_dir: Path) -> None:
    config = json.loads((parent_dir / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [0, 2, 3]
    (parent_dir / "config.json").write_text(json.dumps(config))
    assert _train(tmp_path, str(shard_dir), parent_dir) == ExitCode.INCOMPATIBLE


def _upload_dir(s3: object, bucket: str, prefix: str, root: Path) -> None:
    for path in sorted(root.iterdir()):
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{path.name}", Body=path.read_bytes())  # type: ignore[attr-defined]


def test_s3_buffer_to_registry_candidate(tmp_path: Path, shard_dir: Path, parent_dir: Path,
                                         s3: object) -> None:
    bucket = f"tide-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    _upload_dir(s3, bucket, "captures/rev-a", shard_dir)
    _upload_dir(s3, bucket, "registry/drafts/v1", parent_dir)
    code = main(["train", "--shards", f"s3://{bucket}/captures/rev-a", "--parent-draft",
                 f"s3://{bucket}/registry/drafts/v1", "--target-revision", REVISION, "--registry",
                 f"s3://{bucket}/registry", "--run-id", "run-1", "--work-dir", str(tmp_path / "w"), *FAST])
    assert code == ExitCode.OK
    prefix = "registry/candidates/run-1/"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}  # type: ignore[attr-defined]
    assert keys == {prefix + n for n in ("config.json", "model.safetensors", "eval.json", "manifest.json")}
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=prefix + "manifest.json")["Body"].read())  # type: ignore[attr-defined]
    assert Manifest.model_validate(manifest).kind == "candidate"  # the registry contract's own model
    assert manifest["parent"] == "v1"
    assert manifest["training_window"][0] <= manifest["training_window"][1]
    assert manifest["target_revision"] == REVISION
    assert manifest["tokenizer_hash"] == "tok-hash"
    assert manifest["samples"]["train_requests"] + manifest["samples"]["eval_requests"] == 18
    assert manifest["eval"]["better"]
    assert manifest["draft"]["speculative_tokens"] == 2
    for name, entry in manifest["files"].items():
        body = s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()  # type: ignore[attr-defined]
        assert hashlib.sha256(body).hexdigest() == entry["sha256"]
        assert len(body) == entry["bytes"]
    # the operator's side of the contract accepts it: listed, checksums verified, promoted
    registry = DraftRegistry(s3, bucket, "registry")
    assert registry.list_candidates() == ["run-1"]
    pointer = registry.promote("run-1", target_revision=REVISION, tokenizer_hash="tok-hash",
                               now=datetime.now(UTC))
    assert pointer.version == "v2"  # after the parent's drafts/v1
    # the domain signature of the training split travels with the draft (the draft pool's key)
    signature = registry.draft_manifest("v2").signature
    assert signature is not None
    assert signature.tokens == manifest["samples"]["train_tokens"]
    assert signature.projection == PROJECTION
    assert len(signature.mean) == SIGNATURE_DIMENSIONS
    # the same run id again would overwrite a candidate: refused, storage error
    again = main(["train", "--shards", str(shard_dir), "--parent-draft", str(parent_dir), "--target-revision",
                  REVISION, "--registry", f"s3://{bucket}/registry", "--run-id", "run-1",
                  "--work-dir", str(tmp_path / "w2"), *FAST])
    assert again == ExitCode.STORAGE


def test_not_better_uploads_nothing(tmp_path: Path, shard_dir: Path, parent_dir: Path, s3: object) -> None:
    bucket = f"tide-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    code = _train(tmp_path, str(shard_dir), parent_dir, "--registry", f"s3://{bucket}/r",
                  "--min-improvement", "50")
    assert code == ExitCode.NOT_BETTER
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]


def test_s3_errors_exit_6(tmp_path: Path, shard_dir: Path, parent_dir: Path, s3: object) -> None:
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}"
    assert _train(tmp_path, f"{missing}/captures", parent_dir) == ExitCode.STORAGE
    assert _train(tmp_path, str(shard_dir), parent_dir, "--registry", f"{missing}/r") == ExitCode.STORAGE
    assert _train(tmp_path, str(shard_dir), f"{missing}/drafts/v1") == ExitCode.STORAGE


def test_newest_window_ignores_old_shards(tmp_path: Path, parent_dir: Path) -> None:
    root = write_buffer(tmp_path / "shards")
    old = root / "aaa-old.safetensors"
    write_shard(old, make_shard(50, revision="rev-old"))
    os.utime(old, (1, 1))  # oldest by far: outside a window of 3
    assert _train(tmp_path, str(root), parent_dir, "--window-shards", "3") == ExitCode.OK
    assert _train(tmp_path, str(root), parent_dir, "--window-shards", "4",
                  "--work-dir", str(tmp_path / "w4")) == ExitCode.INCOMPATIBLE


def test_summary_goes_to_the_termination_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")  # Kubernetes mounts it; the trainer only writes where it exists
    monkeypatch.setenv("TIDE_TERMINATION_LOG", str(log))
    (tmp_path / "empty").mkdir()
    code = main(["train", "--shards", str(tmp_path / "empty"), "--target-revision", REVISION,
                 "--target-model", str(tmp_path), "--work-dir", str(tmp_path / "w")])
    summary = json.loads(log.read_text())
    assert summary["exit_code"] == code == ExitCode.INCOMPATIBLE  # no target config.json in tmp_path
    assert "target_model" in summary["error"]
