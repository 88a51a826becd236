"""--shard-claim: the trainer reads exactly the shards the operator's claim object lists (trainer-cli.md)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from synthetic_shards import REVISION

from tide_contracts.registry import DraftRegistry
from tide_trainer.cli import ExitCode, main
from tide_trainer.storage import ClaimedShardSource, StorageError

FAST = ["--ttt-steps", "2", "--epochs", "2", "--lr", "0.01", "--batch-size", "4", "--eval-fraction", "0.3",
        "--log-every", "5", "--speculative-tokens", "2"]


def _buffer(s3: object, shard_dir: Path) -> tuple[str, DraftRegistry]:
    bucket = f"tide-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    for path in sorted(shard_dir.iterdir()):
        s3.put_object(Bucket=bucket, Key=f"ns/chat/captures/{path.name}", Body=path.read_bytes())  # type: ignore[attr-defined]
    return bucket, DraftRegistry(s3, bucket, "ns/chat")


def test_the_source_lists_exactly_the_claimed_shards(shard_dir: Path, s3: object) -> None:
    bucket, registry = _buffer(s3, shard_dir)
    captures = registry.list_captures()
    registry.put_claim("r1", captures[:2], created_at=1.0, expires_at=601.0)
    source = ClaimedShardSource(f"s3://{bucket}/ns/chat/captures", f"s3://{bucket}/ns/chat/claims/r1.json", s3)
    assert [r.name for r in source.list_shards()] == [c.key for c in captures[:2]]
    assert len(captures) > 2


def test_a_claim_naming_shards_elsewhere_is_refused(shard_dir: Path, s3: object) -> None:
    bucket, _ = _buffer(s3, shard_dir)
    claim = {"claim_version": 1, "run_id": "r1", "created_at": 1, "expires_at": 2,
             "shards": [{"key": "other-team/captures/x.safetensors", "last_modified": 1, "size": 1}]}
    s3.put_object(Bucket=bucket, Key="ns/chat/claims/r1.json", Body=json.dumps(claim).encode())  # type: ignore[attr-defined]
    source = ClaimedShardSource(f"s3://{bucket}/ns/chat/captures", f"s3://{bucket}/ns/chat/claims/r1.json", s3)
    with pytest.raises(StorageError, match="outside"):
        source.list_shards()


def test_train_reads_only_the_claimed_window(tmp_path: Path, shard_dir: Path, parent_dir: Path, s3: object) -> None:
    bucket, registry = _buffer(s3, shard_dir)
    captures = registry.list_captures()
    registry.put_claim("r1", captures[-3:], created_at=1.0, expires_at=601.0)
    code = main(["train", "--shards", f"s3://{bucket}/ns/chat/captures", "--shard-claim",
                 f"s3://{bucket}/ns/chat/claims/r1.json", "--parent-draft", str(parent_dir),
                 "--target-revision", REVISION, "--work-dir", str(tmp_path / "w"), *FAST])
    assert code in (ExitCode.OK, ExitCode.NOT_BETTER)
    report = json.loads((tmp_path / "w" / "eval.json").read_text())
    assert report["samples"]["shards"] == 3
    # A claim that is missing is a storage failure (exit 6), never a silent fallback to listing.
    missing = main(["train", "--shards", f"s3://{bucket}/ns/chat/captures", "--shard-claim",
                    f"s3://{bucket}/ns/chat/claims/r9.json", "--parent-draft", str(parent_dir),
                    "--target-revision", REVISION, "--work-dir", str(tmp_path / "w2"), *FAST])
    assert missing == ExitCode.STORAGE
