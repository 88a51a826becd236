"""Capture: shards in the trainer's format on a loopback S3 server (moto), deterministic by seed."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from sim_harness import TOKEN

from tide_contracts import serving_control as sc
from tide_contracts.registry import CAPTURE_SAMPLES_METADATA
from tide_contracts.shards import read_shard
from tide_vllm_sim.capture import CaptureRecorder, CaptureSettings, synthetic_request
from tide_vllm_sim.engine import FinishedRequest
from tide_vllm_sim.s3io import StorageError, s3_endpoint
from tide_vllm_sim.scenario import CaptureModel

MODEL = CaptureModel(hidden_size=8, vocab_size=50, max_rows_per_request=12)


def _complete(url: str, n: int, domain: str = "general") -> None:
    for _ in range(n):
        request = urllib.request.Request(url + "/v1/completions", method="POST",
                                         data=json.dumps({"prompt": "a b c d", "max_tokens": 6}).encode(),
                                         headers={"X-Tide-Domain": domain})
        urllib.request.urlopen(request, timeout=10).read()


def _shards(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    return s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])


def test_capture_writes_trainer_shards_to_s3(start_sim: Any, s3: Any) -> None:
    s3.create_bucket(Bucket="tide")
    sim = start_sim()
    client = sc.ServingControlClient(sim.control_url, TOKEN)
    state = client.set_capture(sc.CaptureRequest(enabled=True, sampling_rate=1.0, destination="s3://tide/captures/"))
    assert state.enabled
    _complete(sim.url, 5)
    state = client.set_capture(sc.CaptureRequest(enabled=False))  # turning off flushes the buffer
    assert state.counters.shards_written == 1
    objects = _shards(s3, "tide", "captures/sim-0/")
    assert len(objects) == 1
    assert objects[0]["Key"].endswith(".safetensors")
    head = s3.head_object(Bucket="tide", Key=objects[0]["Key"])
    assert head["Metadata"][CAPTURE_SAMPLES_METADATA] == "5"
    shard = read_shard(s3.get_object(Bucket="tide", Key=objects[0]["Key"])["Body"].read())
    assert shard.num_requests == 5
    assert shard.num_tokens == 5 * 10  # 4 prompt + 6 generated rows each
    assert shard.header.target_revision == "rev-1"
    assert shard.header.hidden_size == 8
    assert shard.aux_hidden_states.shape == (50, 3, 8)
    assert shard.header.requests[0].draft_version == "initial"
    assert shard.header.requests[0].served_acceptance_rate == pytest.approx((0.8 + 0.64 + 0.512) / 3)
    assert int(shard.token_ids.max()) < 50
    assert shard.loss_mask is not None
    assert shard.loss_mask[:3].tolist() == [False, False, False]
    assert shard.loss_mask[3:10].all()
    assert state.counters.captured_tokens == 50
    assert state.counters.captured_bytes == objects[0]["Size"]


def test_capture_without_a_destination_is_refused(start_sim: Any) -> None:
    sim = start_sim()
    with pytest.raises(sc.ServingControlError) as err:
        sc.ServingControlClient(sim.control_url, TOKEN).set_capture(sc.CaptureRequest(enabled=True))
    assert (err.value.status, err.value.code) == (400, sc.ErrorCode.INVALID_REQUEST)


def test_a_failed_upload_counts_a_write_error(start_sim: Any, s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDE_CAPTURE_URI", "s3://no-such-bucket/c/")
    sim = start_sim()
    client = sc.ServingControlClient(sim.control_url, TOKEN)
    client.set_capture(sc.CaptureRequest(enabled=True, sampling_rate=1.0, destination="s3://no-such-bucket/c/"))
    _complete(sim.url, 2)
    state = client.set_capture(sc.CaptureRequest(enabled=False))
    assert (state.counters.write_errors, state.counters.shards_written) == (1, 0)


def _finished(i: int) -> FinishedRequest:
    return FinishedRequest(f"bg-{i}", 16, 32, 0.5, "v1")


def test_sampling_and_tensors_are_deterministic_given_the_seed(tmp_path: Any) -> None:
    def run(seed: int) -> list[str]:
        recorder = CaptureRecorder(CaptureSettings(destination=str(tmp_path / str(seed)), sampling_rate=0.3,
                                                   pod_name="p"), MODEL, seed, "rev-1")
        recorder.configure(True, None, None)
        for i in range(100):
            recorder.offer(_finished(i))
        return [r.meta.request_id for r in recorder._buffer]

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert 15 <= len(run(1)) <= 45  # about 30% of 100
    a, b = synthetic_request(_finished(3), MODEL, 7, "r"), synthetic_request(_finished(3), MODEL, 7, "r")
    assert (a.aux == b.aux).all()
    assert a.aux.shape == (12, 3, 8)  # capped at max_rows_per_request


def test_shards_flush_at_the_row_bound_and_the_buffer_drops_whole_requests(tmp_path: Any) -> None:
    settings = CaptureSettings(destination=str(tmp_path), sampling_rate=1.0, shard_tokens=24, buffer_tokens=1000,
                               pod_name="p")
    recorder = CaptureRecorder(settings, MODEL, 0, "rev-1")
    recorder.configure(True, None, None)
    for i in range(4):
        recorder.offer(_finished(i))  # 12 rows each: a shard every 2 requests
    assert recorder.state().counters.shards_written == 2
    names = sorted(p.name.split("-")[1] for p in (tmp_path / "p").iterdir())
    assert names == ["000001.safetensors", "000002.safetensors"]
    small = CaptureRecorder(CaptureSettings(destination=str(tmp_path), sampling_rate=1.0, buffer_tokens=20,
                                            shard_tokens=1000, pod_name="q"), MODEL, 0, "rev-1")
    small.configure(True, None, None)
    small.offer(_finished(1))
    small.offer(_finished(2))
    assert small.state().counters.dropped_samples == 1
    assert small.state().counters.buffered_tokens == 12


def test_s3_outside_loopback_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.amazonaws.com")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with pytest.raises(StorageError, match="not on loopback"):
        s3_endpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.5:9000")
    assert s3_endpoint() == "http://127.0.0.5:9000"
