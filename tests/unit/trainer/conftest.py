from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import torch
from moto.server import ThreadedMotoServer
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


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """A boto3 client on the loopback S3 server, with the environment the trainer reads."""
    for key, value in {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    return boto3.client("s3", endpoint_url=moto_endpoint)
