"""The simulator as the operator runs it: a process with vLLM's flags, the scenario from the
environment, driven by the load generator's command line, capturing to a loopback S3 server
(moto) shards that the trainer's own reader accepts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto.server import ThreadedMotoServer

from tide_contracts import serving_control as sc
from tide_localcluster.processes import ProcessRecord, spawn, stop
from tide_serving.testing.server import free_ports
from tide_vllm_sim.load import LoadSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOKEN = "process-token"
SCENARIO = {"seed": 3, "acceptance": {"initial": {"general": 0.6, "arabic": 0.2}},
            "engine": {"step_seconds": 0.002},
            "capture": {"hidden_size": 16, "vocab_size": 100, "aux_layer_ids": [1, 2, 3],
                        "tokenizer_hash": "ab" * 32, "max_rows_per_request": 24}}


@pytest.fixture
def s3_env() -> Iterator[dict[str, str]]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket="tide")
    try:
        yield env
    finally:
        server.stop()


@pytest.fixture
def sim(tmp_path: Path, s3_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    port, control_port = free_ports(2)
    env = {**os.environ, **s3_env, "TIDE_SIM_SCENARIO": str(scenario), "TIDE_CONTROL_TOKEN": TOKEN,
           "TIDE_CONTROL_PORT": str(control_port),
           "TIDE_TARGET_REVISION": "rev-7", "TIDE_POD_NAME": "chat-vllm-0",
           "TIDE_CAPTURE_URI": "s3://tide/chat/captures/", "TIDE_CAPTURE_SAMPLING_RATE": "1.0"}
    # The arguments the operator's serving manifest passes to `vllm serve` (manifests/serving.py).
    argv = [sys.executable, "-m", "tide_vllm_sim", "--model", "org/tiny", "--revision", "rev-7",
            "--served-model-name", "chat", "--tensor-parallel-size", "1", "--host", "127.0.0.1", "--port", str(port),
            "--worker-extension-cls", "tide_serving.worker_extension.TideWorkerExtension",
            "--scheduler-cls", "tide_serving.scheduler.SpeculationSwitchScheduler",
            "--speculative-config", '{"method":"eagle3","model":"s3://tide/chat/drafts/v1","num_speculative_tokens":3}',
            "--max-model-len", "4096", "--enable-prefix-caching"]
    record = spawn("sim", argv, tmp_path / "logs", env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url, record)
        yield url, f"http://127.0.0.1:{control_port}"
    finally:
        stop(record, grace_seconds=3)


def _wait(url: str, record: ProcessRecord) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise TimeoutError(Path(record.log).read_text(errors="replace")[-2000:])


def _load(url: str, *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "tide_vllm_sim.load", "--url", url, *args],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_capture_under_load_gives_shards_the_trainer_reads(sim: tuple[str, str], s3_env: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    api, control = sim
    client = sc.ServingControlClient(control, TOKEN)
    assert client.status().draft.target_revision == "rev-7"  # type: ignore[union-attr]
    client.set_capture(sc.CaptureRequest(enabled=True))  # destination and rate from the pod's environment
    summary = _load(api, "--domain", "arabic", "--rps", "30", "--duration", "1", "--max-tokens", "12")
    assert summary["sent"] == summary["succeeded"] == 30
    state = client.set_capture(sc.CaptureRequest(enabled=False))
    assert state.counters.shards_written >= 1
    prompt_words = len(LoadSpec(url=api).prompt.split())
    assert state.counters.captured_tokens == 30 * (prompt_words + 12)  # prompt rows + generated rows

    for key, value in s3_env.items():
        monkeypatch.setenv(key, value)
    from tide_trainer.data import DataExpectations, load_window, split_samples
    from tide_trainer.storage import S3ShardSource

    expect = DataExpectations(target_revision="rev-7", tokenizer_hash="ab" * 32, target_hidden_size=16,
                              aux_layer_ids=(1, 2, 3), vocab_size=100)
    shards = load_window(S3ShardSource("s3://tide/chat/captures"), 100, expect)
    assert sum(s.num_requests for s in shards) == 30
    train, held_out = split_samples(shards, eval_fraction=0.2, max_seq_len=512)
    assert len(train) + len(held_out) == 30
    rates = [r.served_acceptance_rate for s in shards for r in s.header.requests]
    assert rates == [pytest.approx((0.2 + 0.04 + 0.008) / 3)] * 30  # the initial draft on arabic traffic
