"""The API-server side of the plugin: what each control route does (routes themselves: control_plugin).

Reaches the engine only through the `EngineClient` (`collective_rpc` to the worker extension,
`pause_generation`/`resume_generation`) and the scheduler's switch file. Every operation returns a
contract model or raises `ControlFailure` carrying the contract's error code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from tide_contracts import serving_control as sc
from tide_contracts.pinning import capture_destination_refusal, draft_source_refusal
from tide_contracts.registry import MANIFEST_FILE
from tide_serving import PLUGIN_VERSION
from tide_serving.draft_fetch import fetch_draft, fetch_launch_draft, promoted_source
from tide_serving.draft_source import (
    CONFIG_FILE,
    DraftArchitecture,
    DraftRefused,
    VerifiedDraft,
    architecture_from_config,
    sha256_of,
    verify_draft_dir,
)
from tide_serving.settings import ServingSettings
from tide_serving.speculation_switch import read_switch, read_switch_state, write_switch

log = logging.getLogger(__name__)
SWITCH_SCHEDULERS = ("tide_serving.scheduler.SpeculationSwitchScheduler",
                     "tide_serving.scheduler.SpeculationSwitchAsyncScheduler")


class ControlFailure(Exception):
    def __init__(self, code: sc.ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class ControlState:
    def __init__(self, engine: Any, settings: ServingSettings, *, model_name: str, vllm_version: str,
                 runtime_speculation: bool, launch_speculation: bool) -> None:
        self.engine, self.settings = engine, settings
        self.model_name, self.vllm_version, self.plugin_version = model_name, vllm_version, PLUGIN_VERSION
        self.runtime_speculation, self.launch_speculation = runtime_speculation, launch_speculation
        self.swap_lock = asyncio.Lock()
        self.swap_results = {"success": 0, "refused": 0, "failed": 0}
        self.last_pause_s = 0.0
        self.worker: dict[str, Any] | None = None  # rank 0's last status
        self.warnings: list[str] = []
        self.current_dir: str | None = None  # local directory of the serving draft (restore on failure)
        self.launch_dir: str | None = None  # the --speculative-config draft, when a local directory
        self.launch_source: str | None = None  # the --speculative-config draft as given (path, s3://, hub id)
        self.refresher: asyncio.Task[None] | None = None
        self.control_server: asyncio.Task[None] | None = None  # the routes' own server (control_plugin)

    # ---- snapshot ------------------------------------------------------------------------------
    async def refresh(self) -> dict[str, Any]:
        try:
            statuses = await self.engine.collective_rpc("tide_status", timeout=30)
        except Exception as err:
            raise ControlFailure(sc.ErrorCode.NOT_CONFIGURED, "the engine does not answer tide_status "
                                 f"(launched without --worker-extension-cls?): {err}") from err
        self.worker = next((s for s in statuses if s.get("rank") == 0), statuses[0])
        return self.worker

    @property
    def engine_supported(self) -> bool:
        return bool(self.worker and self.worker["engine"]["supported"])

    def draft_identity(self) -> tuple[str, str] | None:
        if not self.worker or self.worker["architecture"] is None:
            return None
        return self.worker["draft"]["version"], self.worker["draft"]["target_revision"]

    def speculation_enabled(self) -> bool:
        if not self.launch_speculation:
            return False
        return read_switch(self.settings.speculation_switch_file) if self.runtime_speculation else True

    def capture_snapshot(self) -> sc.CaptureState:
        cap = (self.worker or {}).get("capture")
        if cap is None:
            return sc.CaptureState(enabled=False, sampling_rate=self.settings.sampling_rate,
                                   destination=self.settings.capture_uri, counters=sc.CaptureCounters())
        return sc.CaptureState(enabled=cap["enabled"], sampling_rate=cap["sampling_rate"],
                               destination=cap["destination"], counters=sc.CaptureCounters(**cap["counters"]))

    def _draft_info(self) -> sc.DraftInfo | None:
        w = self.worker
        if not w or w["architecture"] is None:
            return None
        arch = DraftArchitecture.from_json(w["architecture"])
        return sc.DraftInfo(version=w["draft"]["version"], target_revision=w["draft"]["target_revision"],
                            source=w["draft"]["source"], hidden_size=arch.target_hidden_size,
                            draft_vocab_size=arch.draft_vocab_size, aux_layer_ids=list(arch.aux_layer_ids),
                            num_speculative_tokens=w["num_speculative_tokens"])

    def _speculation(self) -> sc.SpeculationState:
        k = (self.worker or {}).get("num_speculative_tokens", 0)
        runtime = self.runtime_speculation and self.launch_speculation
        bands = read_switch_state(self.settings.speculation_switch_file)[1] if runtime else None
        return sc.SpeculationState(enabled=self.speculation_enabled(), num_speculative_tokens=k,
                                   runtime_control=runtime, tokens_per_batch_size=bands)

    async def status(self) -> sc.ServingStatus:
        w = await self.refresh()
        warnings = list(self.warnings)
        if not w["engine"]["supported"] or "untested" in w["engine"]["reason"]:
            warnings.append(w["engine"]["reason"])
        return sc.ServingStatus(
            contract_version=sc.CONTRACT_VERSION, plugin_version=self.plugin_version,
            vllm_version=self.vllm_version, engine_supported=w["engine"]["supported"],
            model_name=self.model_name, draft=self._draft_info(), speculation=self._speculation(),
            capture=self.capture_snapshot(), warnings=warnings, max_num_seqs=w.get("max_num_seqs"))

    def _require_supported(self) -> None:
        if not self.engine_supported:
            reason = self.worker["engine"]["reason"] if self.worker else "engine status unknown"
            raise ControlFailure(sc.ErrorCode.UNSUPPORTED_ENGINE, reason)

    # ---- capture and speculation ---------------------------------------------------------------
    async def set_capture(self, req: sc.CaptureRequest) -> sc.CaptureState:
        w = await self.refresh()
        self._require_supported()
        if req.enabled and not (req.destination or w["capture"]["destination"]):
            raise ControlFailure(sc.ErrorCode.INVALID_REQUEST,
                                 "capture needs a destination: none in the request, TIDE_CAPTURE_URI unset")
        if req.destination is not None and not req.destination.startswith("s3://"):
            raise ControlFailure(sc.ErrorCode.INVALID_REQUEST, "destination must be s3://bucket/prefix")
        if req.destination is not None and (refusal := capture_destination_refusal(
                req.destination, self.settings.registry_uri, self.settings.capture_uri)):
            raise ControlFailure(sc.ErrorCode.FORBIDDEN, refusal)
        try:
            await self.engine.collective_rpc("tide_set_capture", timeout=60,
                                             args=(req.enabled, req.sampling_rate, req.destination))
        except Exception as err:
            raise ControlFailure(sc.ErrorCode.ENGINE_ERROR, f"capture switch failed: {err}") from err
        await self.refresh()
        return self.capture_snapshot()

    async def set_speculation(self, req: sc.SpeculationRequest) -> sc.SpeculationState:
        await self.refresh()
        self._require_supported()
        if not (self.runtime_speculation and self.launch_speculation):
            why = ("launched without --speculative-config" if not self.launch_speculation
                   else f"launched without --scheduler-cls {SWITCH_SCHEDULERS[0]}")
            raise ControlFailure(sc.ErrorCode.RESTART_REQUIRED,
                                 f"speculation cannot be switched at runtime on this pod ({why}); "
                                 "roll the pods with the new serving configuration")
        write_switch(self.settings.speculation_switch_file, req.enabled, req.tokens_per_batch_size)
        return self._speculation()

    # ---- draft load ----------------------------------------------------------------------------
    async def load_draft(self, req: sc.DraftLoadRequest) -> sc.DraftLoadResult:
        if self.swap_lock.locked():
            raise ControlFailure(sc.ErrorCode.SWAP_IN_PROGRESS, "another draft load is running on this pod")
        if refusal := draft_source_refusal(req.source, self.settings.registry_uri,
                                           (self.launch_dir or "", self.launch_source or ""),
                                           self.settings.local_drafts_dir):
            self.swap_results["refused"] += 1
            raise ControlFailure(sc.ErrorCode.FORBIDDEN, refusal)
        async with self.swap_lock:
            w = await self.refresh()
            self._require_supported()
            if w["architecture"] is None:
                raise ControlFailure(sc.ErrorCode.RESTART_REQUIRED, "this pod serves no draft "
                                     "(launched without --speculative-config)")
            started = time.monotonic()
            try:
                verified = await asyncio.to_thread(self._launch_or_fetch, req, w)
            except DraftRefused as refused:
                self.swap_results["refused"] += 1
                raise ControlFailure(refused.code, refused.message) from refused
            verify_s = time.monotonic() - started
            previous = w["draft"]["version"]
            pause_s = await self._swap(verified, req.source)
            self.swap_results["success"] += 1
            self.last_pause_s = pause_s
            self.current_dir = str(verified.path)
            info = self._draft_info()
            assert info is not None
            return sc.DraftLoadResult(draft=info, previous_version=previous, verify_seconds=verify_s,
                                      pause_seconds=pause_s)

    def _launch_or_fetch(self, req: sc.DraftLoadRequest, worker: dict[str, Any]) -> VerifiedDraft:
        return self._launch_draft(req, worker) or self._fetch_and_verify(req, worker)

    def _launch_draft(self, req: sc.DraftLoadRequest, worker: dict[str, Any]) -> VerifiedDraft | None:
        """Back to the launch draft (a rollback with nothing promoted): the engine loaded these files at
        launch, so they need no manifest; any other source is fetched and verified."""
        initial = self.settings.initial_draft_version
        launch = {s.rstrip("/") for s in (self.launch_dir, self.launch_source) if s}
        if req.source.rstrip("/") not in launch:
            return None
        if req.version not in (None, initial):
            raise DraftRefused(sc.ErrorCode.INVALID_REQUEST,
                               f"{req.source} is this pod's launch draft, version {initial!r}, not {req.version!r}")
        path = Path(self.launch_dir) if self.launch_dir else fetch_launch_draft(req.source, self.settings.downloads_dir)
        serving = DraftArchitecture.from_json(worker["architecture"])
        arch = architecture_from_config(json.loads((path / CONFIG_FILE).read_text()))
        if diffs := serving.differences(arch):  # the same files as at launch, unless someone replaced them
            raise DraftRefused(sc.ErrorCode.ARCHITECTURE_MISMATCH,
                               f"{req.source} no longer holds the launch draft: " + "; ".join(diffs))
        return VerifiedDraft(path=path, version=initial, target_revision=self.settings.target_revision,
                             architecture=arch)

    def _fetch_and_verify(self, req: sc.DraftLoadRequest, worker: dict[str, Any]) -> VerifiedDraft:
        path = fetch_draft(req.source, self.settings.downloads_dir)
        if req.manifest_sha256 and (actual := sha256_of(path / MANIFEST_FILE)) != req.manifest_sha256:
            raise DraftRefused(sc.ErrorCode.CHECKSUM_MISMATCH,
                               f"{req.source}/{MANIFEST_FILE}: sha256 {actual[:12]}… is not the caller's "
                               f"{req.manifest_sha256[:12]}…")
        return verify_draft_dir(path, serving_revision=self.settings.target_revision,
                                serving=DraftArchitecture.from_json(worker["architecture"]),
                                expected_version=req.version,
                                fallback_version=req.source.rstrip("/").rsplit("/", 1)[-1],
                                tokenizer_hash=worker.get("tokenizer_hash"))

    async def _swap(self, draft: VerifiedDraft, source: str) -> float:
        """pause(keep) -> reload in every worker -> resume; the old draft is restored on failure."""
        paused = time.monotonic()
        await self.engine.pause_generation(mode="keep", clear_cache=False)
        try:
            await self.engine.collective_rpc(
                "tide_reload_draft", timeout=300,
                args=(str(draft.path), draft.version, draft.target_revision, source))
        except Exception as err:
            self.swap_results["failed"] += 1
            restored = await self._restore_previous()
            raise ControlFailure(sc.ErrorCode.ENGINE_ERROR,
                                 f"draft reload failed ({err}); previous draft {restored}") from err
        finally:
            await self.engine.resume_generation()
            pause_s = time.monotonic() - paused
        await self.refresh()
        return pause_s

    async def _restore_previous(self) -> str:
        w = self.worker or {}
        if self.current_dir is None:
            return "not restorable (no local copy): weights may be partially updated"
        d = w.get("draft", {})
        try:
            await self.engine.collective_rpc("tide_reload_draft", timeout=300, args=(
                self.current_dir, d.get("version", "unknown"), d.get("target_revision", ""),
                d.get("source", "")))
        except Exception as err:  # noqa: BLE001
            return f"restore failed: {err}"
        return "restored"

    async def load_promoted(self) -> None:
        """Startup: serve the draft the registry's promoted pointer names, if any."""
        if not self.settings.registry_uri:
            return
        try:
            promoted = await asyncio.to_thread(promoted_source, self.settings.registry_uri,
                                               self.settings.target_revision)
            if promoted is None:
                log.info("tide: no promoted draft (or the launch draft) for target %s; serving the launch draft",
                         self.settings.target_revision)
                return
            source, version, manifest_sha256 = promoted
            result = await self.load_draft(sc.DraftLoadRequest(source=source, version=version,
                                                               manifest_sha256=manifest_sha256))
            log.info("tide: serving promoted draft %s", result.draft.version)
        except (DraftRefused, ControlFailure) as err:
            msg = f"promoted draft not loaded, serving the launch draft: {err}"
            log.warning("tide: %s", msg)
            self.warnings.append(msg)
