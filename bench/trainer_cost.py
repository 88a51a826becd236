"""Training cost: the same draft training steps from stored hidden states vs recomputing them with the
target every epoch (SpecForge "online"), side by side in one run, for targets of growing size.

The draft and the data loader are identical in both arms; the recompute arm runs the target's forward
pass (no grad) over each batch's tokens to produce the three auxiliary states before the draft step.
Weights are random: wall time does not depend on their values.

Run: .venv/bin/python bench/trainer_cost.py [--steps 30]
"""

from __future__ import annotations

import argparse
import time

import torch

from tide_trainer.data import Batch
from tide_trainer.model import DraftConfig, Eagle3Draft
from tide_trainer.objective import ttt_loss
from tide_trainer.tiny_target.model import TinyLlama, TinyLlamaConfig

SIZES = [  # (layers, hidden, heads, kv heads): the tiny target and wider/deeper ones
    (4, 128, 4, 2),
    (8, 256, 8, 4),
    (16, 256, 8, 4),
    (16, 512, 16, 8),
]


def params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def run(layers: int, hidden: int, heads: int, kv: int, *, steps: int, batch: int, seq: int,
        repeats: int) -> dict[str, float]:
    torch.manual_seed(0)
    tcfg = TinyLlamaConfig(hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv, head_dim=32)
    target = TinyLlama(tcfg).eval()
    aux_ids = (1, layers // 2, layers - 1)
    dcfg = DraftConfig(hidden_size=hidden, target_hidden_size=hidden, intermediate_size=3 * hidden,
                       num_attention_heads=heads, num_key_value_heads=kv, head_dim=32, aux_layer_ids=list(aux_ids))
    tokens = torch.randint(0, 512, (steps, batch, seq + 1))
    with torch.no_grad():  # the stored arm's buffer: computed once, like serving did
        stored = [torch.cat(target(t[:, :-1], keep_layers=aux_ids)[1], dim=-1) for t in tokens]

    def train(recompute: bool) -> list[float]:
        """Per-step wall times of one pass over the steps."""
        draft = Eagle3Draft(dcfg)
        opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-4)
        times = []
        for i, t in enumerate(tokens):
            t0 = time.perf_counter()
            if recompute:
                with torch.no_grad():
                    aux = torch.cat(target(t[:, :-1], keep_layers=aux_ids)[1], dim=-1)
            else:
                aux = stored[i]
            b = Batch(aux, t[:, 1:], torch.ones(batch, seq, dtype=torch.bool))
            loss = ttt_loss(draft, b, 3).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        return times

    train(False)  # warm up allocators and kernels
    # the machine is shared: interleave the arms and keep each arm's fastest step (the least disturbed),
    # then scale to the number of steps
    stored_times, recompute_times = [], []
    for _ in range(repeats):
        stored_times += train(False)
        recompute_times += train(True)
    stored_s, recompute_s = steps * min(stored_times), steps * min(recompute_times)
    return {"target_params": params(target), "draft_params": params(Eagle3Draft(dcfg)),
            "stored_s": stored_s, "recompute_s": recompute_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.steps} draft steps, batch {args.batch} x {args.seq} tokens, TTT 3, CPU threads "
          f"{torch.get_num_threads()}; fastest step of {args.repeats} interleaved passes x steps")
    print(f"{'target':>18} {'target/draft':>12} {'stored s':>9} {'recompute s':>11} {'ratio':>6}")
    for layers, hidden, heads, kv in SIZES:
        r = run(layers, hidden, heads, kv, steps=args.steps, batch=args.batch, seq=args.seq, repeats=args.repeats)
        print(f"{f'{layers}L x {hidden}':>18} {r['target_params'] / r['draft_params']:>12.2f} "
              f"{r['stored_s']:>9.2f} {r['recompute_s']:>11.2f} {r['recompute_s'] / r['stored_s']:>6.2f}")


if __name__ == "__main__":
    main()
