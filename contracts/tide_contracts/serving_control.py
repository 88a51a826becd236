"""Serving control contract, version 1 (docs/contracts/serving-control.md).

The operator (and the project's vLLM simulator) drive each serving pod through these routes; the
serving plugin (tide_serving) implements them. Both sides import this module, so a change to the
contract breaks a test instead of production. The client uses only the standard library.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tide_contracts import control_token

CONTRACT_VERSION = 1
API_PREFIX = "/tide/v1"
STATUS_ROUTE = f"{API_PREFIX}/status"
DRAFT_ROUTE = f"{API_PREFIX}/draft"
CAPTURE_ROUTE = f"{API_PREFIX}/capture"
SPECULATION_ROUTE = f"{API_PREFIX}/speculation"
# The bearer token the routes require: a mounted Secret file, re-read on change (control_token.py).
CONTROL_TOKEN_ENV = control_token.CONTROL_TOKEN_ENV
CONTROL_TOKEN_FILE_ENV = control_token.CONTROL_TOKEN_FILE_ENV
# The routes live on their own port, apart from the OpenAI API, so a NetworkPolicy can let only the
# operator reach them while clients and Prometheus reach the API port.
CONTROL_PORT_ENV = "TIDE_CONTROL_PORT"
DEFAULT_CONTROL_PORT = 8081
CONTROL_PORT_NAME = "tide-control"
DEFAULT_SAMPLING_RATE = 0.1

# Metric names the plugin adds to vLLM's /metrics (labels in the contract document).
METRIC_DRAFT_INFO = "tide_draft_info"
METRIC_PLUGIN_INFO = "tide_serving_plugin_info"
METRIC_SPECULATION_ENABLED = "tide_speculation_enabled"
METRIC_CAPTURE_ENABLED = "tide_capture_enabled"
METRIC_CAPTURE_SAMPLING_RATE = "tide_capture_sampling_rate"
METRIC_CAPTURE_TOKENS = "tide_capture_tokens_total"
METRIC_CAPTURE_BYTES = "tide_capture_bytes_total"
METRIC_CAPTURE_SHARDS = "tide_capture_shards_total"
METRIC_CAPTURE_DROPPED = "tide_capture_dropped_samples_total"
METRIC_CAPTURE_WRITE_ERRORS = "tide_capture_write_errors_total"
METRIC_CAPTURE_ENGINE_SECONDS = "tide_capture_engine_seconds_total"
METRIC_CAPTURE_WRITER_SECONDS = "tide_capture_writer_seconds_total"
METRIC_DRAFT_SWAPS = "tide_draft_swaps_total"
METRIC_DRAFT_SWAP_PAUSE = "tide_draft_swap_pause_seconds"


class ErrorCode(StrEnum):
    """Why a control call failed; the HTTP status for each is in ERROR_HTTP_STATUS."""

    UNAUTHORIZED = "unauthorized"
    NOT_CONFIGURED = "not_configured"
    INVALID_REQUEST = "invalid_request"
    SOURCE_UNAVAILABLE = "source_unavailable"
    MANIFEST_INVALID = "manifest_invalid"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    TARGET_REVISION_MISMATCH = "target_revision_mismatch"
    ARCHITECTURE_MISMATCH = "architecture_mismatch"
    SWAP_IN_PROGRESS = "swap_in_progress"
    RESTART_REQUIRED = "restart_required"
    UNSUPPORTED_ENGINE = "unsupported_engine"
    ENGINE_ERROR = "engine_error"
    FORBIDDEN = "forbidden"  # a draft source or capture destination outside the pod's pinned prefixes


ERROR_HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.NOT_CONFIGURED: 503,
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.SOURCE_UNAVAILABLE: 502,
    ErrorCode.MANIFEST_INVALID: 422,
    ErrorCode.CHECKSUM_MISMATCH: 422,
    ErrorCode.TARGET_REVISION_MISMATCH: 409,
    ErrorCode.ARCHITECTURE_MISMATCH: 409,
    ErrorCode.SWAP_IN_PROGRESS: 409,
    ErrorCode.RESTART_REQUIRED: 409,
    ErrorCode.UNSUPPORTED_ENGINE: 503,
    ErrorCode.ENGINE_ERROR: 500,
    ErrorCode.FORBIDDEN: 403,
}


class _Request(BaseModel):
    # Requests reject unknown fields: a typo must fail loudly, not be ignored.
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Response(BaseModel):
    # Responses ignore unknown fields so a newer plugin can add fields within version 1.
    model_config = ConfigDict(frozen=True, extra="ignore")


# ---- requests ----------------------------------------------------------------------------------
class DraftLoadRequest(_Request):
    """Load a draft (registry version directory) into the running engine."""

    source: str = Field(min_length=1, description="s3://bucket/prefix/drafts/vN or a pod-local directory")
    version: str | None = Field(default=None, description="expected manifest version (refused if different)")
    manifest_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$",
        description="expected sha256 of the source's manifest.json, known to the caller from elsewhere than the "
        "source (refused if different); optional within version 1, so older plugins keep working when unset")


class CaptureRequest(_Request):
    """Turn hidden-state capture on or off; omitted fields keep their current value."""

    enabled: bool
    sampling_rate: float | None = Field(default=None, gt=0.0, le=1.0, description="fraction of requests")
    destination: str | None = Field(default=None, description="s3://bucket/prefix/ shards are written under")


Band = tuple[int, int, int]  # (first batch size, last batch size, speculative tokens), inclusive


def validate_bands(bands: list[Band]) -> list[Band]:
    """vLLM's num_speculative_tokens_per_batch_size rules: sorted, non-overlapping, from batch 1, K >= 0."""
    previous_end = 0
    for start, end, k in bands:
        if start < 1 or end < start or k < 0:
            raise ValueError(f"band {[start, end, k]}: needs 1 <= first <= last and tokens >= 0")
        if start <= previous_end:
            raise ValueError("bands must be sorted by batch size and must not overlap")
        previous_end = end
    if bands and bands[0][0] != 1:
        raise ValueError("the first band must start at batch size 1")
    return bands


class SpeculationRequest(_Request):
    enabled: bool
    tokens_per_batch_size: list[Band] | None = Field(
        default=None, min_length=1, description="speculative tokens per batch-size band (each capped at the "
        "launch num_speculative_tokens); null: the launch table")

    @field_validator("tokens_per_batch_size")
    @classmethod
    def _bands(cls, bands: list[Band] | None) -> list[Band] | None:
        return None if bands is None else validate_bands(bands)


# ---- responses ---------------------------------------------------------------------------------
class DraftInfo(_Response):
    version: str = Field(description="registry version of the serving draft, 'initial' for the launch one")
    target_revision: str
    source: str
    hidden_size: int
    draft_vocab_size: int
    aux_layer_ids: list[int]
    num_speculative_tokens: int


class SpeculationState(_Response):
    enabled: bool
    runtime_control: bool = Field(description="false: switching needs a pod restart (see the contract)")
    num_speculative_tokens: int
    tokens_per_batch_size: list[Band] | None = Field(default=None, description="the table in force; null: "
                                                     "the launch table")


class CaptureCounters(_Response):
    captured_tokens: int = 0
    captured_bytes: int = 0
    shards_written: int = 0
    dropped_samples: int = 0
    write_errors: int = 0
    buffered_tokens: int = 0
    engine_seconds: float = 0.0  # time the engine loop spent selecting and copying captured rows
    writer_seconds: float = 0.0  # time the writer thread spent building and uploading shards


class CaptureState(_Response):
    enabled: bool
    sampling_rate: float
    destination: str | None
    counters: CaptureCounters


class DraftLoadResult(_Response):
    draft: DraftInfo
    previous_version: str
    verify_seconds: float
    pause_seconds: float = Field(description="how long generation was paused for the swap")


class ServingStatus(_Response):
    contract_version: int
    plugin_version: str
    vllm_version: str
    engine_supported: bool = Field(description="false: the plugin runs on an untested vLLM and is inert")
    model_name: str
    draft: DraftInfo | None
    speculation: SpeculationState
    capture: CaptureState
    warnings: list[str] = Field(default_factory=list)
    max_num_seqs: int | None = Field(
        default=None, ge=1, description="the engine's max_num_seqs (largest batch it schedules); optional within "
        "version 1: null from plugins that predate it")


class ErrorBody(_Response):
    error: ErrorCode
    message: str
    contract_version: int = CONTRACT_VERSION


# ---- client ------------------------------------------------------------------------------------
class ServingControlError(Exception):
    """A control call failed; `code` says why, `status` is the HTTP status (0: no response)."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(f"{status} {code.value}: {message}")
        self.status = status
        self.code = code
        self.message = message


_R = TypeVar("_R", bound=_Response)


class ServingControlClient:
    """Typed client for one serving pod's control routes (stdlib urllib only)."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s

    def status(self) -> ServingStatus:
        return self._call("GET", STATUS_ROUTE, None, ServingStatus)

    def load_draft(self, request: DraftLoadRequest) -> DraftLoadResult:
        return self._call("POST", DRAFT_ROUTE, request, DraftLoadResult)

    def set_capture(self, request: CaptureRequest) -> CaptureState:
        return self._call("POST", CAPTURE_ROUTE, request, CaptureState)

    def set_speculation(self, request: SpeculationRequest) -> SpeculationState:
        return self._call("POST", SPECULATION_ROUTE, request, SpeculationState)

    def _call(self, method: str, route: str, body: _Request | None, answer: type[_R]) -> _R:
        # Unset optional fields are left out: a plugin of an earlier version 1 (requests forbid unknown
        # fields) still accepts every request that does not use what it lacks.
        data = body.model_dump_json(exclude_none=True).encode() if body is not None else None
        req = urllib.request.Request(
            self.base_url + route, data=data, method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return answer.model_validate_json(resp.read())
        except urllib.error.HTTPError as err:
            raise _error_from_response(err.code, err.read()) from err
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            raise ServingControlError(0, ErrorCode.ENGINE_ERROR, f"{route} unreachable: {err}") from err


def _error_from_response(status: int, payload: bytes) -> ServingControlError:
    try:
        body = ErrorBody.model_validate_json(payload)
    except ValidationError:
        # Not our error body (e.g. a proxy's page): keep the first bytes so the cause is visible.
        text = payload[:200].decode(errors="replace")
        return ServingControlError(status, ErrorCode.ENGINE_ERROR, f"unexpected response: {text}")
    return ServingControlError(status, body.error, body.message)


def error_payload(code: ErrorCode, message: str) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON body for an error; the server side uses this so both agree."""
    return ERROR_HTTP_STATUS[code], json.loads(ErrorBody(error=code, message=message).model_dump_json())
