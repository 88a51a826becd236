"""Encryption on every write (issue 13, item 2): the pods' capture writes and the trainer's candidate
uploads carry the TIDE_S3_SSE settings the operator puts in their environment, read back from a
loopback S3 server (moto, a bucket without default encryption) with head_object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tide_contracts.encryption import SSE_ENV, SSE_KMS_KEY_ID_ENV, EncryptionSettingsError, S3Encryption
from tide_serving.capture_writer import ShardUploader
from tide_serving.settings import load_settings

KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/tenant-a"


def _sse(s3: Any, bucket: str, key: str) -> tuple[str | None, str | None]:
    head = s3.head_object(Bucket=bucket, Key=key)
    return head.get("ServerSideEncryption"), head.get("SSEKMSKeyId")


@pytest.fixture
def bucket(s3: Any, request: pytest.FixtureRequest) -> str:
    name = f"sse-{abs(hash(request.node.name)) % 10**8}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.mark.parametrize(("encryption", "stored"), [
    (S3Encryption("AES256"), ("AES256", None)),
    (S3Encryption("aws:kms", KEY_ARN), ("aws:kms", KEY_ARN)),
    (S3Encryption(), (None, None)),  # no header asked: what the bucket does (here: nothing)
])
def test_capture_shards_carry_the_pods_encryption(s3, bucket, encryption, stored):
    where = ShardUploader(encryption, client=s3).put(f"s3://{bucket}/ns/td/captures/", "pod-0/1.shard", b"x", 3)
    assert where == f"s3://{bucket}/ns/td/captures/pod-0/1.shard"
    assert _sse(s3, bucket, "ns/td/captures/pod-0/1.shard") == stored


def test_the_plugin_reads_its_encryption_from_the_pod_environment(monkeypatch):
    monkeypatch.setenv(SSE_ENV, "aws:kms")
    monkeypatch.setenv(SSE_KMS_KEY_ID_ENV, KEY_ARN)
    assert load_settings().encryption == S3Encryption("aws:kms", KEY_ARN)
    monkeypatch.delenv(SSE_ENV)
    with pytest.raises(EncryptionSettingsError, match=SSE_KMS_KEY_ID_ENV):
        load_settings()
    monkeypatch.delenv(SSE_KMS_KEY_ID_ENV)
    assert load_settings().encryption == S3Encryption()


def test_the_simulators_captures_honour_the_same_environment(s3, bucket, monkeypatch):
    from tide_vllm_sim.s3io import put_object

    monkeypatch.setenv(SSE_ENV, "AES256")
    put_object(f"s3://{bucket}/ns/td/captures/", "sim-0/1.shard", b"x", {"samples": "1"})
    assert _sse(s3, bucket, "ns/td/captures/sim-0/1.shard") == ("AES256", None)


def test_the_trainers_candidate_upload_carries_the_jobs_encryption(s3, bucket, monkeypatch, tmp_path: Path):
    from tide_trainer.storage import StorageError, upload_files

    files = [tmp_path / "config.json", tmp_path / "model.safetensors"]
    for path in files:
        path.write_bytes(b"{}")
    monkeypatch.setenv(SSE_ENV, "aws:kms")
    monkeypatch.setenv(SSE_KMS_KEY_ID_ENV, KEY_ARN)
    keys = upload_files(s3, bucket, "ns/td/candidates/r1", files)
    assert [_sse(s3, bucket, key) for key in keys] == [("aws:kms", KEY_ARN)] * 2
    monkeypatch.setenv(SSE_ENV, "rot13")
    with pytest.raises(StorageError, match="rot13"):
        upload_files(s3, bucket, "ns/td/candidates/r2", files)
