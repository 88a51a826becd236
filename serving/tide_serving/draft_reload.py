"""Layerwise in-place reload of the EAGLE-3 draft's weights inside a worker (vLLM internals).

The same path vLLM's NCCL/IPC weight-transfer engines use: new values are copied into the original
storage (CPU kernels repack weights after load, so a bare `load_weights` fails; CUDA graphs
survive). Weights the draft shares with the target (vLLM shares `embed_tokens` and `lm_head` when
the draft has none of its own or an identical copy) are skipped: writing them through the draft
would change the target. Call only while generation is paused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from tide_serving.draft_source import WEIGHTS_FILE


def shared_prefixes(draft: torch.nn.Module, target: torch.nn.Module) -> tuple[str, ...]:
    """Checkpoint name prefixes the draft shares with the target (must not be written)."""
    prefixes = []
    target_lm_head = getattr(target, "lm_head", None)
    if target_lm_head is not None and getattr(draft, "lm_head", None) is target_lm_head:
        prefixes.append("lm_head.")
    target_inner = getattr(target, "model", None)
    draft_inner = getattr(draft, "model", None)
    target_embed = getattr(target_inner, "embed_tokens", None)
    if target_embed is not None and getattr(draft_inner, "embed_tokens", None) is target_embed:
        prefixes.append("embed_tokens.")
    return tuple(prefixes)


def draft_state_dict(directory: Path, skip: tuple[str, ...]) -> dict[str, torch.Tensor]:
    weights = load_file(str(directory / WEIGHTS_FILE))
    weights.pop("t2d", None)  # speculators writes it, vLLM ignores it
    return {k: v for k, v in weights.items() if not k.startswith(skip)} if skip else weights


def reload_draft_weights(worker: Any, directory: Path) -> list[str]:
    """Reload the draft from `directory` in place; returns the checkpoint names skipped as shared."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import (
        finalize_layerwise_reload,
        initialize_layerwise_reload,
    )

    draft = worker.get_draft_model()
    if draft is None:
        raise RuntimeError("this engine serves no draft model (launched without --speculative-config)")
    skip = shared_prefixes(draft, worker.get_model())
    weights = draft_state_dict(directory, skip)
    config = worker.vllm_config
    with set_current_vllm_config(config), torch.no_grad():
        initialize_layerwise_reload(draft)
        draft.load_weights(iter(weights.items()))
        finalize_layerwise_reload(draft, config.speculative_config.draft_model_config)
    return list(skip)
