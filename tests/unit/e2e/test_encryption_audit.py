"""The whole-loop e2e's last check: every object read back carries server-side encryption.

On a loopback moto S3 with a bucket without default encryption, the audit finds exactly the
objects stored plain (a writer that dropped SSE, or a copy_object that did not pass it again)."""

from __future__ import annotations

from typing import Any

from tide_e2e.encryption_audit import audit_encryption


def test_the_audit_names_every_object_stored_without_encryption(s3: Any) -> None:
    s3.create_bucket(Bucket="audit-loop")
    s3.put_object(Bucket="audit-loop", Key="ns/td/captures/pod-0/1.shard", Body=b"x", ServerSideEncryption="AES256")
    s3.put_object(Bucket="audit-loop", Key="ns/td/candidates/r1/model.safetensors", Body=b"x",
                  ServerSideEncryption="AES256")
    # A copy without SSE of its own is stored plain, whatever its source was.
    s3.copy_object(Bucket="audit-loop", Key="ns/td/drafts/v1/model.safetensors",
                   CopySource={"Bucket": "audit-loop", "Key": "ns/td/candidates/r1/model.safetensors"})
    s3.put_object(Bucket="audit-loop", Key="ns/td/promoted.json", Body=b"{}", ServerSideEncryption="aws:kms")

    audit = audit_encryption(s3, "audit-loop", "ns/td/")
    assert audit.checked == 4
    assert audit.plain == ("ns/td/drafts/v1/model.safetensors",)
    assert audit.other == {"ns/td/promoted.json": "aws:kms"}
    assert not audit.ok
    assert "1 without encryption" in audit.describe()

    assert audit_encryption(s3, "audit-loop", "ns/td/captures/").ok
    assert not audit_encryption(s3, "audit-loop", "nothing-here/").ok  # an empty audit proves nothing
    assert audit.bucket_default is None  # so every encrypted object was encrypted by its writer

    s3.put_bucket_encryption(Bucket="audit-loop", ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    assert audit_encryption(s3, "audit-loop", "ns/td/captures/").bucket_default == "AES256"
