"""The serving plugin's control routes (docs/contracts/serving-control.md), simulated.

Payloads are the contract's own models (tide_contracts.serving_control), so a contract change
breaks the simulator's tests, not the operator's integration tier.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from tide_contracts import serving_control as sc
from tide_contracts.control_token import ControlTokens
from tide_contracts.pinning import LOCAL_DRAFTS_DIR_ENV, capture_destination_refusal, draft_source_refusal
from tide_vllm_sim.capture import CaptureRecorder
from tide_vllm_sim.drafts import DraftLoadError, verify_draft
from tide_vllm_sim.engine import SimEngine
from tide_vllm_sim.scenario import CaptureModel

PLUGIN_VERSION = "sim"
VLLM_VERSION = "0.32.0+sim"
Answer = tuple[int, dict[str, Any]]


@dataclass
class PodControl:
    """What the control routes change, besides the engine's draft and speculation switch."""

    engine: SimEngine
    capture: CaptureRecorder
    model_name: str
    target_revision: str
    runtime_control: bool  # launched with the plugin's scheduler: speculation switches live
    draft_source: str = "launch"
    launch_source: str | None = None  # --speculative-config's model as given: going back to it needs no manifest
    launch_version: str = "initial"
    tokens: ControlTokens = field(default_factory=ControlTokens.from_environment)
    # Where drafts may come from and captures go (tide_contracts.pinning), as the plugin reads them.
    registry_uri: str | None = field(default_factory=lambda: os.environ.get("TIDE_REGISTRY_URI") or None)
    capture_uri: str | None = field(default_factory=lambda: os.environ.get("TIDE_CAPTURE_URI") or None)
    local_drafts_dir: str | None = field(default_factory=lambda: os.environ.get(LOCAL_DRAFTS_DIR_ENV) or None)
    swap_results: dict[str, int] = field(default_factory=dict)
    last_pause_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    _swap_lock: threading.Lock = field(default_factory=threading.Lock)

    def draft_info(self) -> sc.DraftInfo | None:
        version = self.engine.draft_version
        if version is None:
            return None
        model: CaptureModel = self.engine.scenario.capture
        return sc.DraftInfo(version=version, target_revision=self.target_revision, source=self.draft_source,
                            hidden_size=model.hidden_size, draft_vocab_size=model.vocab_size,
                            aux_layer_ids=list(model.aux_layer_ids),
                            num_speculative_tokens=self.engine.num_speculative_tokens)

    def speculation(self) -> sc.SpeculationState:
        return sc.SpeculationState(enabled=self.engine.speculation_enabled and self.engine.draft_version is not None,
                                   runtime_control=self.runtime_control,
                                   num_speculative_tokens=self.engine.num_speculative_tokens,
                                   tokens_per_batch_size=self.engine.bands)

    def status(self) -> sc.ServingStatus:
        return sc.ServingStatus(
            contract_version=sc.CONTRACT_VERSION, plugin_version=PLUGIN_VERSION, vllm_version=VLLM_VERSION,
            engine_supported=True, model_name=self.model_name, draft=self.draft_info(),
            speculation=self.speculation(), capture=self.capture.state(), warnings=list(self.warnings),
            max_num_seqs=self.engine.max_num_seqs)

    def load_draft(self, request: sc.DraftLoadRequest) -> sc.DraftLoadResult:
        previous = self.engine.draft_version
        if previous is None:
            raise DraftLoadError(sc.ErrorCode.RESTART_REQUIRED, "pod was launched without --speculative-config")
        if refusal := draft_source_refusal(request.source, self.registry_uri, (self.launch_source or "",),
                                           self.local_drafts_dir):
            self._count("refused")
            raise DraftLoadError(sc.ErrorCode.FORBIDDEN, refusal)
        if not self._swap_lock.acquire(blocking=False):
            raise DraftLoadError(sc.ErrorCode.SWAP_IN_PROGRESS, "another draft load is running on this pod")
        started = time.monotonic()
        try:
            version = self._launch_version(request) or verify_draft(request.source, request.version,
                                                                    self.target_revision, request.manifest_sha256)
        except DraftLoadError:
            self._count("refused")
            raise
        finally:
            self._swap_lock.release()
        with self.engine.lock:
            self.engine.draft_version, self.draft_source = version, request.source
        self._count("success")
        self.last_pause_s = 0.0
        info = self.draft_info()
        assert info is not None
        return sc.DraftLoadResult(draft=info, previous_version=previous,
                                  verify_seconds=time.monotonic() - started, pause_seconds=0.0)

    def _launch_version(self, request: sc.DraftLoadRequest) -> str | None:
        """The plugin's rule: the launch draft (the files the engine loaded at start) needs no manifest."""
        if self.launch_source is None or request.source.rstrip("/") != self.launch_source.rstrip("/"):
            return None
        if request.version not in (None, self.launch_version):
            raise DraftLoadError(sc.ErrorCode.INVALID_REQUEST, f"{request.source} is this pod's launch draft, "
                                 f"version {self.launch_version!r}, not {request.version!r}")
        return self.launch_version

    def set_speculation(self, request: sc.SpeculationRequest) -> sc.SpeculationState:
        if not self.runtime_control:
            raise DraftLoadError(sc.ErrorCode.RESTART_REQUIRED,
                                 "speculation switches at runtime only with the plugin's scheduler (--scheduler-cls)")
        with self.engine.lock:
            self.engine.speculation_enabled = request.enabled
            self.engine.bands = list(request.tokens_per_batch_size or ()) or None if request.enabled else None
        return self.speculation()

    def set_capture(self, request: sc.CaptureRequest) -> sc.CaptureState:
        if request.enabled and self.engine.draft_version is None:
            raise DraftLoadError(sc.ErrorCode.RESTART_REQUIRED,
                                 "a pod launched without --speculative-config computes no auxiliary states")
        if request.destination is not None and (refusal := capture_destination_refusal(
                request.destination, self.registry_uri, self.capture_uri)):
            raise DraftLoadError(sc.ErrorCode.FORBIDDEN, refusal)
        try:
            self.capture.configure(request.enabled, request.sampling_rate, request.destination)
        except ValueError as err:
            raise DraftLoadError(sc.ErrorCode.INVALID_REQUEST, str(err)) from err
        return self.capture.state()

    def _count(self, result: str) -> None:
        self.swap_results[result] = self.swap_results.get(result, 0) + 1


_ROUTES: dict[tuple[str, str], tuple[type[BaseModel] | None, str]] = {
    ("GET", sc.STATUS_ROUTE): (None, "status"),
    ("POST", sc.DRAFT_ROUTE): (sc.DraftLoadRequest, "load_draft"),
    ("POST", sc.CAPTURE_ROUTE): (sc.CaptureRequest, "set_capture"),
    ("POST", sc.SPECULATION_ROUTE): (sc.SpeculationRequest, "set_speculation"),
}


def is_control_route(path: str) -> bool:
    return path.startswith(sc.API_PREFIX + "/")


def handle(pod: PodControl, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
    """HTTP status and JSON body of one control call."""
    accepted = pod.tokens.accepted()  # re-read when the mounted Secret changes, as the plugin does
    if not accepted:
        return sc.error_payload(sc.ErrorCode.NOT_CONFIGURED, f"no token in {sc.CONTROL_TOKEN_FILE_ENV} or "
                                f"{sc.CONTROL_TOKEN_ENV} on this pod")
    given = headers.get("Authorization", "").removeprefix("Bearer ")
    if not any([hmac.compare_digest(given.encode(), t.encode()) for t in accepted]):  # noqa: C419 - each compared
        return sc.error_payload(sc.ErrorCode.UNAUTHORIZED, "missing or wrong bearer token")
    route = _ROUTES.get((method, path))
    if route is None:
        return 404, {"error": "not_found", "message": f"no route {method} {path}",
                     "contract_version": sc.CONTRACT_VERSION}
    model, action = route
    try:
        args = [model.model_validate_json(body or b"{}")] if model is not None else []
        answer: BaseModel = getattr(pod, action)(*args)
    except ValidationError as err:
        return sc.error_payload(sc.ErrorCode.INVALID_REQUEST, f"{path}: {err.errors()[0]['msg']} "
                                f"at {'.'.join(map(str, err.errors()[0]['loc']))}")
    except DraftLoadError as err:
        return sc.error_payload(err.code, err.message)
    return 200, answer.model_dump(mode="json")
