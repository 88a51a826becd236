"""The simulator over HTTP: vLLM's routes and metrics, the plugin's control routes (contract client)."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sim_harness import TOKEN, RunningSim

from tide_contracts import serving_control as sc
from tide_vllm_sim.args import parse_args


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _metrics(sim: RunningSim) -> dict[str, Any]:
    with urllib.request.urlopen(sim.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError(f"{sample} {labels}")


def _client(sim: RunningSim, token: str = TOKEN) -> sc.ServingControlClient:
    return sc.ServingControlClient(sim.control_url, token, timeout_s=10)


def test_command_line_is_vllms_and_unknown_flags_are_ignored() -> None:
    args = parse_args(["--model", "m", "--served-model-name", "chat", "--tensor-parallel-size", "2",
                       "--worker-extension-cls", "x.Y", "--load-format", "runai_streamer", "--port", "9000",
                       "--speculative-config", '{"method":"eagle3","num_speculative_tokens":4}'])
    assert (args.served_model_name, args.port, args.num_speculative_tokens) == ("chat", 9000, 4)
    assert parse_args(["m"]).served_model_name == "m"  # `vllm serve MODEL`


def test_metrics_use_vllms_names_types_and_labels(start_sim: Any) -> None:
    sim = start_sim()
    answer = _post(sim.url + "/v1/completions", {"prompt": "one two three", "max_tokens": 200},
                   {"X-Tide-Domain": "korean"})
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 200, "total_tokens": 203}
    families = _metrics(sim)
    types = {name: families[name].type for name in families}
    assert types["vllm:num_requests_running"] == "gauge"
    assert types["vllm:num_requests_waiting"] == "gauge"
    assert types["vllm:generation_tokens"] == "counter"
    assert types["vllm:prompt_tokens"] == "counter"
    assert types["vllm:request_success"] == "counter"
    assert types["vllm:e2e_request_latency_seconds"] == "histogram"
    assert types["tide_draft_info"] == "gauge"
    labels = {"model_name": "chat", "engine": "0"}
    assert _value(families, "vllm:generation_tokens", "vllm:generation_tokens_total", **labels) == 200
    assert _value(families, "vllm:request_success", "vllm:request_success_total", finished_reason="length") == 1
    assert _value(families, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == 1
    drafts = _value(families, "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total", **labels)
    pos0 = _value(families, "vllm:spec_decode_num_accepted_tokens_per_pos",
                  "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0", **labels)
    assert pos0 / drafts == pytest.approx(0.3, abs=0.02)  # initial draft on korean traffic
    assert _value(families, "tide_draft_info", "tide_draft_info", version="initial", target_revision="rev-1") == 1


def test_chat_completions_answer_a_message(start_sim: Any) -> None:
    sim = start_sim()
    answer = _post(sim.url + "/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 5})
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["usage"]["completion_tokens"] == 5


def test_pod_without_speculative_config_has_no_draft_and_no_spec_counters(start_sim: Any) -> None:
    sim = start_sim(speculative=False)
    families = _metrics(sim)
    assert "vllm:spec_decode_num_drafts" not in families
    assert "tide_draft_info" not in families
    status = _client(sim).status()
    assert status.draft is None
    with pytest.raises(sc.ServingControlError) as err:
        _client(sim).set_speculation(sc.SpeculationRequest(enabled=True))
    assert err.value.code is sc.ErrorCode.RESTART_REQUIRED


def test_status_reports_max_num_seqs_as_launched(start_sim: Any) -> None:
    assert _client(start_sim("--max-num-seqs", "48")).status().max_num_seqs == 48
    assert _client(start_sim()).status().max_num_seqs == 256  # vLLM's default


def test_control_routes_need_the_bearer_token(start_sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = start_sim()
    with pytest.raises(sc.ServingControlError) as err:
        _client(sim, "wrong").status()
    assert (err.value.status, err.value.code) == (401, sc.ErrorCode.UNAUTHORIZED)
    monkeypatch.setenv("TIDE_CONTROL_TOKEN", "")
    unconfigured = start_sim()
    with pytest.raises(sc.ServingControlError) as err:
        _client(unconfigured, "").status()
    assert (err.value.status, err.value.code) == (503, sc.ErrorCode.NOT_CONFIGURED)


def test_control_routes_live_only_on_the_control_port(start_sim: Any) -> None:
    sim = start_sim()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(sim.url + sc.STATUS_ROUTE,
                                                      headers={"Authorization": f"Bearer {TOKEN}"}), timeout=10)
    assert err.value.code == 404
    assert _client(sim, TOKEN).status().model_name == "chat"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(sim.control_url + "/v1/models", timeout=10)
    assert err.value.code == 404


def test_a_rotated_token_file_is_accepted_without_a_restart(start_sim: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "control" / "token"
    token_file.parent.mkdir()
    token_file.write_text("first")
    monkeypatch.setenv("TIDE_CONTROL_TOKEN_FILE", str(token_file))
    sim = start_sim()
    assert _client(sim, "first").status().model_name == "chat"
    token_file.write_text("second")
    (token_file.parent / "previous-token").write_text("first")
    assert _client(sim, "second").status().model_name == "chat"
    assert _client(sim, "first").status().model_name == "chat"  # the rotation's grace
    (token_file.parent / "previous-token").unlink()
    with pytest.raises(sc.ServingControlError) as err:
        _client(sim, "first").status()
    assert err.value.code is sc.ErrorCode.UNAUTHORIZED
    with pytest.raises(sc.ServingControlError):  # a named file wins over TIDE_CONTROL_TOKEN
        _client(sim, TOKEN).status()


def test_unknown_request_fields_are_invalid(start_sim: Any) -> None:
    sim = start_sim()
    request = urllib.request.Request(sim.control_url + sc.SPECULATION_ROUTE, data=b'{"enabled": true, "typo": 1}',
                                     method="POST", headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400
    assert sc.ErrorBody.model_validate_json(err.value.read()).error is sc.ErrorCode.INVALID_REQUEST


def test_speculation_switches_off_at_runtime_and_counters_stop(start_sim: Any) -> None:
    sim = start_sim()
    client = _client(sim)
    assert client.status().speculation.enabled
    state = client.set_speculation(sc.SpeculationRequest(enabled=False))
    assert (state.enabled, state.runtime_control) == (False, True)
    _post(sim.url + "/v1/completions", {"prompt": "x", "max_tokens": 20})
    families = _metrics(sim)
    assert _value(families, "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total") == 0
    assert _value(families, "tide_speculation_enabled", "tide_speculation_enabled") == 0


def test_speculation_without_the_plugin_scheduler_needs_a_restart(start_sim: Any) -> None:
    sim = start_sim("--scheduler-cls", "vllm.v1.core.sched.scheduler.Scheduler")
    with pytest.raises(sc.ServingControlError) as err:
        _client(sim).set_speculation(sc.SpeculationRequest(enabled=False))
    assert (err.value.status, err.value.code) == (409, sc.ErrorCode.RESTART_REQUIRED)


def test_a_pod_rolled_with_launch_bands_speculates_by_them(start_sim: Any) -> None:
    """The operator's restart fallback: K=0 at every batch size, set in --speculative-config."""
    off = json.dumps({"method": "eagle3", "model": "d", "num_speculative_tokens": 3,
                      "num_speculative_tokens_per_batch_size": [[1, 1 << 20, 0]]})
    sim = start_sim("--speculative-config", off, "--scheduler-cls", "vllm.v1.core.sched.scheduler.Scheduler")
    assert sim.pod.engine.speculative_tokens() == 0
    _post(sim.url + "/v1/completions", {"prompt": "x", "max_tokens": 20})
    assert _value(_metrics(sim), "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total") == 0


def _draft_dir(root: Path, version: str, target_revision: str = "rev-1", corrupt: bool = False) -> Path:
    directory = root / "drafts" / version
    directory.mkdir(parents=True)
    files = {"config.json": b'{"speculators_model_type": "eagle3"}', "model.safetensors": b"weights" + version.encode()}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    entries = {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)} for name, data in files.items()}
    if corrupt:
        (directory / "model.safetensors").write_bytes(b"tampered")
    manifest = {"kind": "draft", "run_id": "r1", "version": version, "created_at": "2026-01-01T00:00:00Z",
                "target_revision": target_revision, "files": entries}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def test_hot_swap_serves_the_new_versions_acceptance(start_sim: Any, tmp_path: Path) -> None:
    sim = start_sim()
    client = _client(sim)
    result = client.load_draft(sc.DraftLoadRequest(source=str(_draft_dir(tmp_path, "v2")), version="v2"))
    assert (result.draft.version, result.previous_version) == ("v2", "initial")
    _post(sim.url + "/v1/completions", {"prompt": "x", "max_tokens": 300, "tide_domain": "korean"})
    families = _metrics(sim)
    drafts = _value(families, "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total")
    pos0 = _value(families, "vllm:spec_decode_num_accepted_tokens_per_pos",
                  "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0")
    assert pos0 / drafts == pytest.approx(0.7, abs=0.02)  # v2 is good on korean
    assert _value(families, "tide_draft_info", "tide_draft_info", version="v2") == 1
    assert _value(families, "tide_draft_swaps", "tide_draft_swaps_total", result="success") == 1


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"corrupt": True}, sc.ErrorCode.CHECKSUM_MISMATCH),
    ({"target_revision": "rev-0"}, sc.ErrorCode.TARGET_REVISION_MISMATCH),
])
def test_a_bad_draft_is_refused_and_the_old_one_keeps_serving(
    start_sim: Any, tmp_path: Path, kwargs: dict[str, Any], code: sc.ErrorCode
) -> None:
    sim = start_sim()
    with pytest.raises(sc.ServingControlError) as err:
        _client(sim).load_draft(sc.DraftLoadRequest(source=str(_draft_dir(tmp_path, "v3", **kwargs))))
    assert err.value.code is code
    assert _client(sim).status().draft.version == "initial"  # type: ignore[union-attr]


def test_sources_and_destinations_outside_the_pods_prefixes_are_forbidden(start_sim: Any, tmp_path: Path) -> None:
    sim = start_sim()
    good = _draft_dir(tmp_path, "v3")
    for source in ("s3://other-team/drafts/v3", "/etc", f"{good}/../../../etc"):
        with pytest.raises(sc.ServingControlError) as err:
            _client(sim).load_draft(sc.DraftLoadRequest(source=source))
        assert (err.value.status, err.value.code) == (403, sc.ErrorCode.FORBIDDEN), source
    with pytest.raises(sc.ServingControlError) as err:
        _client(sim).set_capture(sc.CaptureRequest(enabled=True, destination="s3://other-team/captures/"))
    assert err.value.code is sc.ErrorCode.FORBIDDEN
    with pytest.raises(sc.ServingControlError) as err:  # the right files, but not the manifest the caller knows
        _client(sim).load_draft(sc.DraftLoadRequest(source=str(good), manifest_sha256="0" * 64))
    assert err.value.code is sc.ErrorCode.CHECKSUM_MISMATCH
    status = _client(sim).status()
    assert status.draft.version == "initial"  # type: ignore[union-attr]
    assert not status.capture.enabled


def test_a_missing_draft_source_is_unavailable(start_sim: Any, tmp_path: Path) -> None:
    with pytest.raises(sc.ServingControlError) as err:
        _client(start_sim()).load_draft(sc.DraftLoadRequest(source=str(tmp_path / "nowhere")))
    assert (err.value.status, err.value.code) == (502, sc.ErrorCode.SOURCE_UNAVAILABLE)


def test_running_requests_are_the_batch_size(start_sim: Any) -> None:
    import threading

    sim = start_sim()
    slow = [threading.Thread(target=_post, args=(sim.url + "/v1/completions", {"prompt": "x", "max_tokens": 1500}))
            for _ in range(3)]
    for thread in slow:
        thread.start()
    # The most seen at once while they run (a fixed number of polls missed the overlap on a loaded machine).
    running = 0.0
    while any(thread.is_alive() for thread in slow) and running < 3:
        running = max(running, _value(_metrics(sim), "vllm:num_requests_running", "vllm:num_requests_running"))
    for thread in slow:
        thread.join()
    assert running == 3
    assert _value(_metrics(sim), "vllm:num_requests_running", "vllm:num_requests_running") == 0
