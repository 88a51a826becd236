"""The control side without vLLM: the typed client against a stub server, and the route logic
(ControlState) against a fake engine that records what the engine was asked to do."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tide_contracts import serving_control as sc
from tide_serving.control_state import ControlFailure, ControlState
from tide_serving.draft_source import architecture_from_config
from tide_serving.engine_support import check_engine
from tide_serving.settings import load_settings
from tide_serving.speculation_switch import read_switch, read_switch_state, write_switch

# ---- typed client ------------------------------------------------------------------------------


class Stub(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, str | None, bytes]]] = []
    reply: tuple[int, bytes] = (200, b"{}")

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Stub.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        status, payload = Stub.reply
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Stub.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


CAPTURE = {"enabled": True, "sampling_rate": 0.2, "destination": "s3://b/c", "future_field": 1,
           "counters": {"captured_tokens": 5}}


def test_client_sends_the_token_and_parses_responses(stub: str) -> None:
    Stub.reply = (200, json.dumps(CAPTURE).encode())
    state = sc.ServingControlClient(stub, "tok").set_capture(sc.CaptureRequest(enabled=True, sampling_rate=0.2))
    method, path, auth, body = Stub.seen[-1]
    assert (method, path, auth) == ("POST", sc.CAPTURE_ROUTE, "Bearer tok")
    assert json.loads(body) == {"enabled": True, "sampling_rate": 0.2}  # unset: omitted (an earlier plugin accepts it)
    assert state.counters.captured_tokens == 5  # unknown response fields are ignored


def test_client_raises_the_contract_error(stub: str) -> None:
    status, body = sc.error_payload(sc.ErrorCode.CHECKSUM_MISMATCH, "model.safetensors differs")
    Stub.reply = (status, json.dumps(body).encode())
    with pytest.raises(sc.ServingControlError) as err:
        sc.ServingControlClient(stub, "tok").load_draft(sc.DraftLoadRequest(source="s3://b/drafts/v2"))
    assert (err.value.status, err.value.code) == (422, sc.ErrorCode.CHECKSUM_MISMATCH)
    Stub.reply = (502, b"<html>bad gateway</html>")
    with pytest.raises(sc.ServingControlError, match="bad gateway") as err:
        sc.ServingControlClient(stub, "tok").status()
    assert err.value.code is sc.ErrorCode.ENGINE_ERROR


def test_requests_reject_unknown_fields_and_bad_rates() -> None:
    with pytest.raises(ValueError, match="extra"):
        sc.SpeculationRequest.model_validate({"enabled": True, "enabeld": False})
    with pytest.raises(ValueError, match="sampling_rate"):
        sc.CaptureRequest(enabled=True, sampling_rate=1.5)


def test_unreachable_pod_is_status_zero() -> None:
    with pytest.raises(sc.ServingControlError) as err:
        sc.ServingControlClient("http://127.0.0.1:9", "tok", timeout_s=2).status()
    assert err.value.status == 0


# ---- route logic against a fake engine ---------------------------------------------------------

ARCH = {"speculators_model_type": "eagle3", "draft_vocab_size": 512, "target_hidden_size": 128,
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
        "transformer_layer_config": {"vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
                                     "num_hidden_layers": 1, "num_attention_heads": 4,
                                     "num_key_value_heads": 2, "head_dim": 32}}


class FakeEngine:
    def __init__(self, fail_reload: bool = False, max_num_seqs: int | None = 128) -> None:
        self.calls: list[str] = []
        self.fail_reload, self.max_num_seqs = fail_reload, max_num_seqs
        self.draft = {"version": "initial", "target_revision": "rev-1", "source": "/launch"}
        self.capture = {"enabled": False, "sampling_rate": 0.1, "destination": None,
                        "counters": {"captured_tokens": 0}}

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple = ()) -> list[Any]:
        self.calls.append(method)
        if method == "tide_status":
            return [{"rank": 0, "engine": {"supported": True, "reason": "tested"}, "draft": dict(self.draft),
                     "num_speculative_tokens": 3,
                     "architecture": architecture_from_config(ARCH).to_json(), "capture": self.capture}
                    | ({"max_num_seqs": self.max_num_seqs} if self.max_num_seqs is not None else {})]
        if method == "tide_reload_draft":
            if self.fail_reload and args[1] != "initial":
                raise RuntimeError("shape mismatch in layers.0")
            self.draft = {"version": args[1], "target_revision": args[2], "source": args[3]}
            return [{}]
        if method == "tide_set_capture":
            self.capture = {**self.capture, "enabled": args[0], "destination": args[2] or self.capture["destination"]}
            return [self.capture]
        raise AssertionError(method)

    async def pause_generation(self, mode: str, clear_cache: bool) -> None:
        assert (mode, clear_cache) == ("keep", False)
        self.calls.append("pause")

    async def resume_generation(self) -> None:
        self.calls.append("resume")


def control(tmp_path: Path, engine: FakeEngine, runtime: bool = True) -> ControlState:
    settings = replace(load_settings(), state_dir=tmp_path / "state", target_revision="rev-1",
                       registry_uri="s3://b/reg", capture_uri=None, local_drafts_dir=str(tmp_path))
    c = ControlState(engine, settings, model_name="m", vllm_version="0.32.0", runtime_speculation=runtime,
                     launch_speculation=True)
    c.current_dir = "/launch"
    return c


def version_dir(root: Path, revision: str = "rev-1") -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(ARCH))
    (root / "model.safetensors").write_bytes(b"w")
    files = {n: {"sha256": hashlib.sha256((root / n).read_bytes()).hexdigest(), "bytes": (root / n).stat().st_size}
             for n in ("config.json", "model.safetensors")}
    (root / "manifest.json").write_text(json.dumps({"kind": "draft", "run_id": "r", "created_at": "2026-12-02",
                                                    "target_revision": revision, "files": files}))
    return root


def test_status_reports_the_engines_max_num_seqs_and_none_from_an_older_worker(tmp_path: Path) -> None:
    assert asyncio.run(control(tmp_path, FakeEngine(max_num_seqs=128)).status()).max_num_seqs == 128
    assert asyncio.run(control(tmp_path, FakeEngine(max_num_seqs=None)).status()).max_num_seqs is None
    with pytest.raises(ValueError, match="max_num_seqs"):  # the contract's bound: an engine batches >= 1
        sc.ServingStatus.model_validate({**asyncio.run(control(tmp_path, FakeEngine()).status()).model_dump(),
                                         "max_num_seqs": 0})


def test_swap_pauses_reloads_and_resumes(tmp_path: Path) -> None:
    engine = FakeEngine()
    c = control(tmp_path, engine)
    result = asyncio.run(c.load_draft(sc.DraftLoadRequest(source=str(version_dir(tmp_path / "v2")))))
    assert (result.previous_version, result.draft.version) == ("initial", "v2")
    assert engine.calls[1:4] == ["pause", "tide_reload_draft", "resume"]
    assert c.swap_results["success"] == 1


def test_refused_draft_never_pauses_the_engine(tmp_path: Path) -> None:
    engine = FakeEngine()
    c = control(tmp_path, engine)
    with pytest.raises(ControlFailure) as err:
        asyncio.run(c.load_draft(sc.DraftLoadRequest(source=str(version_dir(tmp_path / "v2", "rev-0")))))
    assert err.value.code is sc.ErrorCode.TARGET_REVISION_MISMATCH
    assert "pause" not in engine.calls
    assert c.swap_results["refused"] == 1


def test_failed_reload_restores_the_previous_draft_and_resumes(tmp_path: Path) -> None:
    engine = FakeEngine(fail_reload=True)
    c = control(tmp_path, engine)
    with pytest.raises(ControlFailure) as err:
        asyncio.run(c.load_draft(sc.DraftLoadRequest(source=str(version_dir(tmp_path / "v2")))))
    assert err.value.code is sc.ErrorCode.ENGINE_ERROR
    assert "restored" in err.value.message
    assert engine.calls[-1] == "resume"
    assert engine.draft["version"] == "initial"


def test_concurrent_swaps_are_refused(tmp_path: Path) -> None:
    c = control(tmp_path, FakeEngine())

    async def race() -> None:
        async with c.swap_lock:
            await c.load_draft(sc.DraftLoadRequest(source=str(tmp_path)))

    with pytest.raises(ControlFailure) as err:
        asyncio.run(race())
    assert err.value.code is sc.ErrorCode.SWAP_IN_PROGRESS


def test_speculation_switch_and_its_fallback(tmp_path: Path) -> None:
    c = control(tmp_path, FakeEngine())
    assert not asyncio.run(c.set_speculation(sc.SpeculationRequest(enabled=False))).enabled
    assert read_switch(c.settings.speculation_switch_file) is False
    fixed = control(tmp_path, FakeEngine(), runtime=False)
    with pytest.raises(ControlFailure) as err:
        asyncio.run(fixed.set_speculation(sc.SpeculationRequest(enabled=False)))
    assert err.value.code is sc.ErrorCode.RESTART_REQUIRED


def test_speculative_tokens_per_batch_size_reach_the_switch_file_and_status(tmp_path: Path) -> None:
    c = control(tmp_path, FakeEngine())
    state = asyncio.run(c.set_speculation(sc.SpeculationRequest(enabled=True,
                                                                tokens_per_batch_size=[[1, 4, 3], [5, 64, 1]])))
    assert state.enabled
    assert state.tokens_per_batch_size == [(1, 4, 3), (5, 64, 1)]
    assert read_switch_state(c.settings.speculation_switch_file) == (True, [(1, 4, 3), (5, 64, 1)])
    launch = asyncio.run(c.set_speculation(sc.SpeculationRequest(enabled=True)))  # back to the launch table
    assert launch.tokens_per_batch_size is None
    off = asyncio.run(c.set_speculation(sc.SpeculationRequest(enabled=False, tokens_per_batch_size=[[1, 8, 2]])))
    assert (off.enabled, off.tokens_per_batch_size) == (False, None)


@pytest.mark.parametrize("bands", [[[2, 8, 3]], [[1, 8, 3], [4, 16, 1]], [[1, 8, -1]], [[1, 0, 2]], []])
def test_bands_vllm_would_refuse_are_refused_by_the_contract(bands: list) -> None:
    with pytest.raises(ValueError, match=r"band|batch size|at least 1 item"):
        sc.SpeculationRequest(enabled=True, tokens_per_batch_size=bands)


def test_a_damaged_switch_file_means_as_launched(tmp_path: Path) -> None:
    path = tmp_path / "switch"
    assert read_switch_state(path) == (True, None)  # no file yet
    path.write_text("1 [[1, 4")
    assert read_switch_state(path) == (True, None)
    write_switch(path, False, [(1, 4, 2)])
    assert read_switch_state(path) == (False, None)


def test_capture_needs_an_s3_destination(tmp_path: Path) -> None:
    c = control(tmp_path, FakeEngine())
    with pytest.raises(ControlFailure) as err:
        asyncio.run(c.set_capture(sc.CaptureRequest(enabled=True)))
    assert err.value.code is sc.ErrorCode.INVALID_REQUEST
    state = asyncio.run(c.set_capture(sc.CaptureRequest(enabled=True, destination="s3://b/reg/captures")))
    assert state.enabled
    assert state.destination == "s3://b/reg/captures"
    with pytest.raises(ControlFailure) as err:  # another tenant's prefix: refused, the switch untouched
        asyncio.run(c.set_capture(sc.CaptureRequest(enabled=True, destination="s3://b/other-team/captures")))
    assert err.value.code is sc.ErrorCode.FORBIDDEN
    assert "s3://b/reg/" in err.value.message
    assert c.capture_snapshot().destination == "s3://b/reg/captures"


def test_a_foreign_draft_source_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    engine = FakeEngine()
    c = control(tmp_path, engine)
    for source in ("s3://b/other-team/drafts/v2", "s3://b/reg/../other-team/drafts/v2", "/etc", "s3://evil/x"):
        with pytest.raises(ControlFailure) as err:
            asyncio.run(c.load_draft(sc.DraftLoadRequest(source=source)))
        assert err.value.code is sc.ErrorCode.FORBIDDEN, source
    assert engine.calls == []  # not even a status call: nothing was fetched, paused or swapped
    assert engine.draft["version"] == "initial"


def test_a_manifest_checksum_from_the_caller_must_match(tmp_path: Path) -> None:
    import hashlib as hl

    engine = FakeEngine()
    c = control(tmp_path, engine)
    source = version_dir(tmp_path / "v2")
    wrong = "0" * 64
    with pytest.raises(ControlFailure) as err:
        asyncio.run(c.load_draft(sc.DraftLoadRequest(source=str(source), manifest_sha256=wrong)))
    assert err.value.code is sc.ErrorCode.CHECKSUM_MISMATCH
    assert "pause" not in engine.calls
    assert engine.draft["version"] == "initial"  # the old draft still serves
    right = hl.sha256((source / "manifest.json").read_bytes()).hexdigest()
    result = asyncio.run(c.load_draft(sc.DraftLoadRequest(source=str(source), manifest_sha256=right)))
    assert result.draft.version == "v2"


def test_untested_engines_are_inert_unless_overridden() -> None:
    assert check_engine("0.32.0", "v1", allow_untested=False).supported
    refused = check_engine("0.33.0", "v2", allow_untested=False)
    assert not refused.supported
    assert "untested" in refused.reason
    assert check_engine("0.33.0", "v2", allow_untested=True).supported


# ---- back to a launch draft that has no manifest -----------------------------------------------


def launched_from(tmp_path: Path, engine: FakeEngine, source: str) -> ControlState:
    c = control(tmp_path, engine)
    c.current_dir = c.launch_dir = None  # streamed from S3 (or the hub): no local directory
    c.launch_source = source
    engine.draft = {"version": "v3", "target_revision": "rev-1", "source": "s3://b/drafts/v3"}  # after a promotion
    return c


def test_rollback_to_an_s3_launch_draft_fetches_the_files_it_was_launched_with(tmp_path: Path, s3: Any) -> None:
    s3.create_bucket(Bucket="seed")
    s3.put_object(Bucket="seed", Key="eagle3/config.json", Body=json.dumps(ARCH).encode())
    s3.put_object(Bucket="seed", Key="eagle3/model.safetensors", Body=b"w")
    s3.put_object(Bucket="seed", Key="eagle3/old/unrelated.bin", Body=b"not the draft's")
    engine = FakeEngine()
    c = launched_from(tmp_path, engine, "s3://seed/eagle3")

    result = asyncio.run(c.load_draft(sc.DraftLoadRequest(source="s3://seed/eagle3/", version=None)))
    assert (result.previous_version, result.draft.version) == ("v3", "initial")
    local = Path(c.current_dir or "")
    assert sorted(p.name for p in local.iterdir()) == [".complete", "config.json", "model.safetensors"]

    s3.delete_object(Bucket="seed", Key="eagle3/model.safetensors")  # the copy is kept: a later rollback needs no S3
    again = asyncio.run(c.load_draft(sc.DraftLoadRequest(source="s3://seed/eagle3", version="initial")))
    assert again.draft.version == "initial"
    assert c.current_dir == str(local)


def test_the_launch_draft_is_refused_under_another_version_or_when_it_is_gone(tmp_path: Path, s3: Any) -> None:
    s3.create_bucket(Bucket="gone")
    c = launched_from(tmp_path, FakeEngine(), "s3://gone/eagle3")
    with pytest.raises(ControlFailure) as err:
        asyncio.run(c.load_draft(sc.DraftLoadRequest(source="s3://gone/eagle3", version="v1")))
    assert err.value.code is sc.ErrorCode.INVALID_REQUEST
    with pytest.raises(ControlFailure) as err:
        asyncio.run(c.load_draft(sc.DraftLoadRequest(source="s3://gone/eagle3")))
    assert err.value.code is sc.ErrorCode.SOURCE_UNAVAILABLE
    assert "no objects" in err.value.message

    hub = launched_from(tmp_path / "hub", FakeEngine(), "org/eagle3-not-cached")
    with pytest.raises(ControlFailure) as err:
        asyncio.run(hub.load_draft(sc.DraftLoadRequest(source="org/eagle3-not-cached")))
    assert err.value.code is sc.ErrorCode.SOURCE_UNAVAILABLE
    assert "model cache" in err.value.message
