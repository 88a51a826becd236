"""Worker extension (`--worker-extension-cls tide_serving.worker_extension.TideWorkerExtension`).

vLLM mixes this class into every worker; the control routes reach it with `collective_rpc`. It owns
the capture pipeline of its worker (recorder on the engine thread, writer thread; only rank 0
captures, so with tensor parallelism nothing is written twice) and performs the draft reload.
Every method returns plain data (dicts) so results cross process boundaries unchanged.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tide_serving import PLUGIN_VERSION
from tide_serving.capture_recorder import CaptureCounters, CaptureRecorder
from tide_serving.capture_writer import CaptureWriter, ShardIdentity, ShardUploader
from tide_serving.draft_reload import reload_draft_weights
from tide_serving.draft_source import DraftArchitecture, architecture_from_hf
from tide_serving.engine_support import EngineSupport, check_engine, runner_kind
from tide_serving.runner_tap_v1 import install_v1_tap
from tide_serving.runner_tap_v2 import install_v2_tap
from tide_serving.settings import ServingSettings, load_settings

log = logging.getLogger(__name__)


@dataclass
class _ServingDraft:
    version: str
    target_revision: str
    source: str


class _WorkerState:
    def __init__(self, worker: Any) -> None:
        import vllm

        self.settings: ServingSettings = load_settings()
        self.rank = int(getattr(worker, "rank", 0))
        self.support: EngineSupport = check_engine(
            vllm.__version__, runner_kind(worker.model_runner), self.settings.allow_untested_vllm)
        spec = worker.vllm_config.speculative_config
        self.architecture: DraftArchitecture | None = (
            architecture_from_hf(spec.draft_model_config.hf_config) if spec and spec.draft_model_config
            else None)
        self.num_speculative_tokens = int(spec.num_speculative_tokens) if spec else 0
        self.draft = _ServingDraft(self.settings.initial_draft_version, self.settings.target_revision,
                                   str(spec.model) if spec else "")
        self.counters = CaptureCounters()
        self.writer: CaptureWriter | None = None
        self.recorder = CaptureRecorder(self._submit, self.counters, self.settings.capture_buffer_rows)
        self.destination = self.settings.capture_uri
        self.tapped = False
        self.tokenizer_hash = _tokenizer_hash(worker)
        if not self.support.supported:
            log.warning("tide serving plugin: %s", self.support.reason)

    def _submit(self, sample: Any) -> bool:
        return self.writer is not None and self.writer.submit(sample)

    def ensure_writer(self, worker: Any) -> CaptureWriter:
        if self.writer is None:
            self.writer = CaptureWriter(
                _shard_identity(worker, self), self.counters, shard_rows=self.settings.shard_rows,
                queue_rows=self.settings.capture_buffer_rows, flush_interval_s=self.settings.flush_interval_s,
                draft_version=lambda: self.draft.version, uploader=ShardUploader(self.settings.encryption))
        return self.writer


def _tokenizer_hash(worker: Any) -> str | None:
    """sha256 of the target's tokenizer.json (None when the tokenizer is not a local directory)."""
    tokenizer = Path(str(worker.vllm_config.model_config.tokenizer)) / "tokenizer.json"
    return hashlib.sha256(tokenizer.read_bytes()).hexdigest() if tokenizer.is_file() else None


def _shard_identity(worker: Any, state: _WorkerState) -> ShardIdentity:
    arch = state.architecture
    return ShardIdentity(
        target_revision=state.settings.target_revision, tokenizer_hash=state.tokenizer_hash or "unknown",
        aux_layer_ids=arch.aux_layer_ids if arch else (),
        hidden_size=int(worker.vllm_config.model_config.hf_config.hidden_size),
        writer_id=state.settings.pod_name)


class TideWorkerExtension:
    """Methods callable through collective_rpc; names are prefixed to avoid clashing with the Worker's."""

    def _tide(self) -> _WorkerState:
        state = getattr(self, "_tide_state", None)
        if state is None:
            state = self._tide_state = _WorkerState(self)
        return state

    def tide_status(self) -> dict[str, Any]:
        s = self._tide()
        s.recorder.finish_if_idle(s.settings.flush_interval_s)
        writer_rows = s.writer.buffered_rows if s.writer else 0
        return {
            "rank": s.rank, "plugin_version": PLUGIN_VERSION, "tokenizer_hash": s.tokenizer_hash,
            "engine": asdict(s.support),
            "draft": asdict(s.draft), "num_speculative_tokens": s.num_speculative_tokens,
            "max_num_seqs": int(self.vllm_config.scheduler_config.max_num_seqs),
            "architecture": s.architecture.to_json() if s.architecture else None,
            "capture": {"enabled": s.recorder.enabled, "sampling_rate": s.recorder.sampling_rate or
                        s.settings.sampling_rate, "destination": s.destination, "tapped": s.tapped,
                        "counters": {**asdict(s.counters), "buffered_tokens": s.recorder.buffered_rows
                                     + writer_rows}},
        }

    def tide_set_capture(self, enabled: bool, sampling_rate: float | None,
                         destination: str | None) -> dict[str, Any]:
        s = self._tide()
        if not s.support.supported:
            raise RuntimeError(s.support.reason)
        if destination is not None:
            s.destination = destination
        rate = sampling_rate or s.recorder.sampling_rate or s.settings.sampling_rate
        if enabled and s.rank == 0:
            if s.destination is None:
                raise ValueError("capture has no destination: set one in the request or TIDE_CAPTURE_URI")
            if not s.tapped:
                install = install_v2_tap if s.support.runner == "v2" else install_v1_tap
                s.tapped = install(self.model_runner, s.recorder)
                if not s.tapped:
                    raise RuntimeError(f"cannot tap the {s.support.runner} model runner for capture")
            s.ensure_writer(self).destination = s.destination
        s.recorder.configure(enabled and s.rank == 0, rate)
        if not enabled and s.writer is not None:
            s.writer.flush()
        return self.tide_status()["capture"]

    def tide_flush_capture(self) -> dict[str, Any]:
        s = self._tide()
        s.recorder.finish_if_idle(0.0)
        if s.writer is not None:
            s.writer.flush()
        return self.tide_status()["capture"]

    def tide_reload_draft(self, directory: str, version: str, target_revision: str,
                          source: str) -> dict[str, Any]:
        s = self._tide()
        if not s.support.supported:
            raise RuntimeError(s.support.reason)
        skipped = reload_draft_weights(self, Path(directory))
        s.draft = _ServingDraft(version, target_revision, source)
        log.info("tide: draft %s loaded from %s (shared with the target, skipped: %s)", version, source,
                 skipped or "none")
        return {"draft": asdict(s.draft), "skipped": skipped}
