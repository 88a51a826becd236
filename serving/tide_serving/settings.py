"""Pod settings of the serving plugin, read once from the environment (docs/contracts/serving-control.md)."""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tide_contracts.control_token import ControlTokens
from tide_contracts.encryption import S3Encryption
from tide_contracts.pinning import LOCAL_DRAFTS_DIR_ENV
from tide_contracts.serving_control import CONTROL_PORT_ENV, DEFAULT_CONTROL_PORT, DEFAULT_SAMPLING_RATE


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError as err:
        raise ValueError(f"{name}={raw!r}: expected a number") from err


def _int(name: str, default: int) -> int:
    return int(_float(name, default))


def _port(name: str, default: int) -> int:
    port = _int(name, default)
    if not 1 <= port <= 65535:
        raise ValueError(f"{name}={port}: must be a TCP port (1-65535)")
    return port


@dataclass(frozen=True)
class ServingSettings:
    control_tokens: ControlTokens
    control_port: int
    target_revision: str
    initial_draft_version: str
    registry_uri: str | None
    capture_uri: str | None
    local_drafts_dir: str | None  # pod-local drafts may be loaded only under it (tide_contracts.pinning)
    sampling_rate: float
    capture_buffer_rows: int
    shard_rows: int
    flush_interval_s: float
    state_dir: Path
    pod_name: str
    metrics_refresh_s: float
    allow_untested_vllm: bool
    encryption: S3Encryption = field(default_factory=S3Encryption)  # TIDE_S3_SSE*: on every capture write

    @property
    def speculation_switch_file(self) -> Path:
        return self.state_dir / "speculation-enabled"

    @property
    def downloads_dir(self) -> Path:
        return self.state_dir / "drafts"


def load_settings() -> ServingSettings:
    rate = _float("TIDE_CAPTURE_SAMPLING_RATE", DEFAULT_SAMPLING_RATE)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"TIDE_CAPTURE_SAMPLING_RATE={rate}: must be in (0, 1]")
    return ServingSettings(
        control_tokens=ControlTokens.from_environment(),
        control_port=_port(CONTROL_PORT_ENV, DEFAULT_CONTROL_PORT),
        target_revision=os.environ.get("TIDE_TARGET_REVISION", "unknown"),
        initial_draft_version=os.environ.get("TIDE_DRAFT_VERSION", "initial"),
        registry_uri=os.environ.get("TIDE_REGISTRY_URI") or None,
        capture_uri=os.environ.get("TIDE_CAPTURE_URI") or None,
        local_drafts_dir=os.environ.get(LOCAL_DRAFTS_DIR_ENV) or None,
        sampling_rate=rate,
        capture_buffer_rows=_int("TIDE_CAPTURE_BUFFER_TOKENS", 65536),
        shard_rows=_int("TIDE_CAPTURE_SHARD_TOKENS", 4096),
        flush_interval_s=_float("TIDE_CAPTURE_FLUSH_S", 10.0),
        # The container's own temporary directory (pod-local; TMPDIR where a pod shares a machine).
        state_dir=Path(os.environ.get("TIDE_STATE_DIR") or Path(tempfile.gettempdir()) / "tide-serving"),
        pod_name=os.environ.get("TIDE_POD_NAME") or socket.gethostname(),
        metrics_refresh_s=_float("TIDE_METRICS_REFRESH_S", 2.0),
        allow_untested_vllm=os.environ.get("TIDE_ALLOW_UNTESTED_VLLM", "") == "1",
        encryption=S3Encryption.from_env(os.environ),
    )
