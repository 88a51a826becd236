"""The operator's fallback for pods without the plugin's scheduler: it rolls them with vLLM's launch
table of speculative tokens per batch size. Off is K=0 at every batch size (OFF_BANDS): no drafts are
proposed, output stays exact, the draft stays loaded, and capture still works (the target still
computes the auxiliary layers), which removing --speculative-config would lose.

The pods of a deployment that starts without a draft run exactly this way with the bootstrap head
(issue 14 item 4), so the draft here is the one `tide_trainer init` makes for the tiny target: a
freshly initialised head loads in the real engine at K=0 and the capture it enables lands in S3."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving_vllm_helpers import TOKEN, make_bucket

from tide_contracts import serving_control as sc
from tide_operator.manifests.serving import OFF_BANDS

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> str:
    return make_bucket()


@pytest.fixture(scope="module")
def bootstrap_head(tiny_models, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the operator's init Job writes, made by the same command line (here to a local directory)."""
    from tide_trainer.cli import ExitCode, main

    tmp = tmp_path_factory.mktemp("bootstrap")
    head = tmp / "head"
    assert main(["init", "--target-model", str(tiny_models.target), "--target-revision", "tiny-bigram-1",
                 "--output", str(head), "--work-dir", str(tmp / "work")]) == ExitCode.OK
    return head


@pytest.fixture(scope="module")
def server(bootstrap_head: Path, tiny_models, bucket: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tide_serving.testing.server import ServerConfig, start_server

    tmp = tmp_path_factory.mktemp("rolled")
    env = {sc.CONTROL_TOKEN_ENV: TOKEN, "TIDE_STATE_DIR": str(tmp / "state"), "TIDE_POD_NAME": "pod-r",
           "TIDE_TARGET_REVISION": "tiny-bigram-1", "TIDE_CAPTURE_FLUSH_S": "0.5",
           "TIDE_CAPTURE_URI": f"s3://{bucket}/captures"}
    srv = start_server(ServerConfig(target=tiny_models.target, draft=bootstrap_head,
                                    log_path=tmp / "server.log", env=env, switch_scheduler=False,
                                    tokens_per_batch_size=[list(band) for band in OFF_BANDS]))
    try:
        yield srv
    finally:
        srv.stop()


def test_rolled_off_proposes_no_drafts_and_still_captures(server, tiny_models, bucket: str) -> None:
    from tide_serving.testing.server import complete, metric_value, metrics_text
    from tide_serving.testing.tiny_models import bigram_next

    client = sc.ServingControlClient(server.control_url, TOKEN, timeout_s=120)
    status = client.status()
    assert status.draft is not None  # the draft is still loaded: hot swaps keep working
    assert not status.speculation.runtime_control
    client.set_capture(sc.CaptureRequest(enabled=True, sampling_rate=1.0, destination=f"s3://{bucket}/captures"))
    before = metrics_text(server)
    text = complete(server, "w40 w41 w42", 16)["choices"][0]["text"]
    after = metrics_text(server)
    bigram, last, expected = bigram_next(tiny_models.target), 42, []
    for _ in range(16):
        last = bigram[last]
        expected.append(last)
    assert [int(w[1:]) for w in text.split()] == expected
    drafted = (metric_value(after, "vllm:spec_decode_num_draft_tokens_total")
               - metric_value(before, "vllm:spec_decode_num_draft_tokens_total"))
    assert drafted == 0
    captured = client.set_capture(sc.CaptureRequest(enabled=False)).counters.captured_tokens
    assert captured >= 16
    assert status.draft.aux_layer_ids == [1, 2, 3]  # the head's [1, L/2, L-1] for the 4-layer target
    assert _shards(bucket), "capture with the bootstrap head wrote no shard to S3"


def _shards(bucket: str, timeout_s: float = 30.0) -> list[str]:
    """The capture shards in S3, once the writer has flushed them (TIDE_CAPTURE_FLUSH_S)."""
    import boto3

    s3, deadline = boto3.client("s3"), time.monotonic() + timeout_s
    while True:
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="captures/").get("Contents", [])]
        if keys or time.monotonic() > deadline:
            return keys
        time.sleep(0.5)
