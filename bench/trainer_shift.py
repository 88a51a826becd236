"""Shift and recovery on the tiny target: a draft trained on domain A (code) meets domain B (prose).

Side by side in one run, on held-out requests of each domain (expected acceptance length, K drafted
tokens, greedy verification against the target's sampled continuations):
  static    draft trained offline on A, served unchanged on B
  adapted   the static draft fine-tuned on B's captured states after 1k / 4k / 16k captured tokens
  offline-B a fresh draft trained on the same B tokens with the same epochs (the reference)
and the forgetting of the 16k-adapted draft when traffic shifts back to A.

Run: .venv/bin/python bench/trainer_shift.py [--out results.json]   (builds the cached target once)
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from pathlib import Path

import torch

from tide_contracts.shards import HiddenStateShard
from tide_trainer.config import TrainConfig
from tide_trainer.data import Sample, iter_batches, split_samples
from tide_trainer.model import Eagle3Draft
from tide_trainer.objective import evaluate_acceptance
from tide_trainer.starting_point import fresh_draft, target_draft_config
from tide_trainer.tiny_target.build import ensure_tiny_target, load_tiny_target
from tide_trainer.tiny_target.capture import CaptureSettings, capture_shard
from tide_trainer.train import fit

K = 3
ROWS_PER_REQUEST = 128  # 32 prompt + 96 generated
BUDGETS = (1024, 4096, 16384)  # captured tokens (rows) of domain B


def capture(
    model: torch.nn.Module, tok: object, info: dict[str, object], domain: str, shards: int, seed: int
) -> list[HiddenStateShard]:
    settings = CaptureSettings(seed=seed, requests_per_shard=16)
    return [
        capture_shard(model, tok, info, domain=domain, index=i, settings=settings)  # type: ignore[arg-type]
        for i in range(shards)
    ]


def samples(shards: list[HiddenStateShard]) -> list[Sample]:
    train, _ = split_samples(shards, 0.0, ROWS_PER_REQUEST)  # every request is training data
    return train


def eval_batches(shards: list[HiddenStateShard]) -> list:
    _, held_out = split_samples(shards, 1.0, ROWS_PER_REQUEST)  # every request is held out
    return list(iter_batches(held_out, 16))


def train_cfg(work: Path, epochs: int) -> TrainConfig:
    return TrainConfig(
        shards="in-memory",
        target_revision="bench",
        target_model="in-memory",
        work_dir=str(work),
        ttt_steps=K,
        lr=2e-3,
        batch_size=8,
        epochs=epochs,
        log_every=10_000,
        checkpoint_every=10_000_000,
        seed=0,
    )


def trained(start: Eagle3Draft, data: list[Sample], work: Path, epochs: int) -> tuple[Eagle3Draft, float]:
    model = Eagle3Draft(start.cfg)
    model.load_state_dict(start.state_dict())
    # fit() resumes from <work>/checkpoint.pt: a checkpoint left by an earlier run of this bench would
    # make this one report that run's draft (or train nothing at all).
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.monotonic()
    fit(model, data, train_cfg(work, epochs))
    return model, time.monotonic() - t0


def acceptance(model: Eagle3Draft, batches: list) -> float:
    return float(evaluate_acceptance(model, batches, K)["acceptance_length"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--work", type=Path, default=Path("/tmp/tide-bench-shift"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.manual_seed(0)

    target_dir = ensure_tiny_target()
    target, tok, info = load_tiny_target(target_dir)
    t0 = time.monotonic()
    a_train, a_eval = capture(target, tok, info, "code", 8, seed=1), capture(target, tok, info, "code", 2, seed=2)
    b_train, b_eval = capture(target, tok, info, "prose", 8, seed=3), capture(target, tok, info, "prose", 2, seed=4)
    capture_s = time.monotonic() - t0
    a_batches, b_batches = eval_batches(a_eval), eval_batches(b_eval)
    b_samples = samples(b_train)

    cfg = target_draft_config(target_dir, [1, 2, 3], None)
    scratch = fresh_draft(target_dir, cfg, [], seed=0)
    static, static_s = trained(scratch, samples(a_train), args.work / "static", args.epochs)
    rows: dict[str, object] = {
        "untrained_on_B": acceptance(scratch, b_batches),
        "static_on_A": acceptance(static, a_batches),
        "static_on_B": acceptance(static, b_batches),
    }
    budgets = []
    for budget in BUDGETS:
        data = b_samples[: budget // ROWS_PER_REQUEST]
        adapted, adapt_s = trained(static, data, args.work / f"adapt-{budget}", args.epochs)
        offline, _ = trained(scratch, data, args.work / f"offline-{budget}", args.epochs)
        entry = {
            "tokens": budget,
            "adapted_on_B": acceptance(adapted, b_batches),
            "offline_B_on_B": acceptance(offline, b_batches),
            "adapt_seconds": round(adapt_s, 2),
        }
        entry["adapted_over_offline"] = entry["adapted_on_B"] / entry["offline_B_on_B"]
        if budget == BUDGETS[-1]:
            entry["adapted_on_A"] = acceptance(adapted, a_batches)  # shift back: forgetting
        budgets.append(entry)
    rows["budgets"] = budgets
    rows["forgetting_on_A"] = rows["static_on_A"] - budgets[-1]["adapted_on_A"]  # type: ignore[operator]
    rows["meta"] = {
        "k": K,
        "epochs": args.epochs,
        "target": info["revision"],
        "capture_seconds": round(capture_s, 1),
        "static_train_seconds": round(static_s, 1),
        "eval_requests_per_domain": 32,
        "torch_threads": torch.get_num_threads(),
    }
    report(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


def report(rows: dict) -> None:
    print(f"expected acceptance length, K={K} (1 = nothing accepted, {K + 1} = all)")
    print(f"  untrained draft on B            {rows['untrained_on_B']:.3f}")
    print(f"  static (trained on A) on A      {rows['static_on_A']:.3f}")
    print(f"  static (trained on A) on B      {rows['static_on_B']:.3f}")
    for b in rows["budgets"]:
        print(
            f"  after {b['tokens']:>6} B tokens: adapted {b['adapted_on_B']:.3f}  offline-B {b['offline_B_on_B']:.3f}"
            f"  ratio {b['adapted_over_offline']:.2f}  ({b['adapt_seconds']} s)"
        )
    last = rows["budgets"][-1]
    print(
        f"  shift back to A: adapted {last['adapted_on_A']:.3f} vs static {rows['static_on_A']:.3f}"
        f"  (forgetting {rows['forgetting_on_A']:.3f})"
    )


if __name__ == "__main__":
    main()
