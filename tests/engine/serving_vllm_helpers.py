"""Helpers shared by the real-engine tests (a loopback S3 bucket, uploads, the control token)."""

from __future__ import annotations

import uuid
from pathlib import Path

TOKEN = "test-control-token"


def make_bucket() -> str:
    """A fresh bucket on the loopback S3 (the s3_endpoint fixture must be active)."""
    import boto3

    name = f"tide-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def upload_dir(directory: Path, bucket: str, prefix: str) -> str:
    import boto3

    client = boto3.client("s3")
    for path in directory.iterdir():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{path.name}", Body=path.read_bytes())
    return f"s3://{bucket}/{prefix}"
