"""Which pool signature predicts acceptance (issue 16): hidden-state statistics or a short evaluation.

On the tiny target, a pool of drafts (trained on code = A, prose = B, a 50/50 mix, and an early code
draft from one shard) meets "recent capture windows" with a share of A of 1, 0.8, 0.5, 0.2 and 0,
each drawn for several seeds. For every window the truth is each draft's expected acceptance length on
a large held-out set of that window's distribution (per-domain sums, mixed exactly); the predictors:
  signature  the pooled draft nearest by signature_distance between the signature of its training
             captures and the signature of n window requests (tide_contracts.signature, as run.py keeps it)
  evaluation the pooled draft with the highest evaluate_acceptance on the same n window requests
and per predictor and n: how often it picks the truly best draft, the acceptance it loses against the
best (regret), Spearman's rank correlation of its scores with the truth, and its wall clock per decision
(capture excluded: both read states the window already holds).

Run: .venv/bin/python bench/draft_pool_signature.py [--out results.json] [--epochs 10] [--seeds 3]
(progress goes to stderr; on 2 cores shared at load 5, capture took 205 s and training 257 s: run it on
idle cores; --seeds 1 --epochs 5 cut capture by a third and training by half, not measured)
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench.trainer_shift

from bench.trainer_shift import K, acceptance, capture, samples, trained
from tide_contracts.draft_pool import DomainSignature, signature_distance
from tide_contracts.signature import domain_signature
from tide_trainer.data import Sample, iter_batches
from tide_trainer.model import Eagle3Draft
from tide_trainer.objective import evaluate_acceptance
from tide_trainer.starting_point import fresh_draft, target_draft_config
from tide_trainer.tiny_target.build import ensure_tiny_target, load_tiny_target

SHARES_A = (1.0, 0.8, 0.5, 0.2, 0.0)  # share of domain A (code) requests in a window
SLICES = (4, 16, 64)  # window requests a predictor reads
WINDOW_REQUESTS = 64  # per domain and seed: the pool a window's slices are drawn from
TRAIN_SHARDS, TRUTH_SHARDS = 4, 8  # per domain, 16 requests each
# capture seeds: training A=1, B=3 and truth A=2, B=4 as bench/trainer_shift.py; windows below
TRAIN_SEEDS, TRUTH_SEEDS = {"code": 1, "prose": 3}, {"code": 2, "prose": 4}
WINDOW_SEED_BASE = {"code": 100, "prose": 200}  # window seed s captures A with 100+s, B with 200+s


# ---------------------------------------------------------------- pure helpers


@dataclass(frozen=True)
class Tally:
    """What evaluate_acceptance summed over some requests: accepted draft tokens and engine rounds."""

    accepted: float
    rounds: int
    requests: int


def mixed_acceptance(a: Tally, b: Tally, share_a: float) -> float:
    """Acceptance length on a large set whose requests are A with probability share_a, else B.

    The engine's acceptance length is a ratio of sums (accepted tokens over rounds), so a mixture mixes
    the per-request sums, not the two acceptance lengths.
    """
    accepted = share_a * a.accepted / a.requests + (1 - share_a) * b.accepted / b.requests
    rounds = share_a * a.rounds / a.requests + (1 - share_a) * b.rounds / b.requests
    return 1.0 + accepted / rounds


def window_slice(pool_a: Sequence[Sample], pool_b: Sequence[Sample], share_a: float, n: int,
                 rng: random.Random) -> list[Sample]:
    """n requests of a window: round(share_a * n) drawn from A's pool, the rest from B's, no repeats."""
    from_a = round(share_a * n)
    return rng.sample(list(pool_a), from_a) + rng.sample(list(pool_b), n - from_a)


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson on tie-averaged ranks); 0 when either side is constant."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((x - mx) * (y - my) for x, y in zip(rx, ry, strict=True))
    vx, vy = sum((x - mx) ** 2 for x in rx), sum((y - my) ** 2 for y in ry)
    return cov / (vx * vy) ** 0.5 if vx and vy else 0.0


@dataclass(frozen=True)
class Judgement:
    picked: str
    best: str
    hit: bool  # picked a draft whose true acceptance equals the best's
    regret: float  # true acceptance length lost against the best
    rho: float  # Spearman of the predictor's scores with the truth


def judge(scores: dict[str, float], truth: dict[str, float]) -> Judgement:
    """A predictor's scores (higher = better) against the true acceptance of the same drafts."""
    names = sorted(truth)
    picked = max(names, key=lambda name: (scores[name], name))
    best = max(names, key=lambda name: (truth[name], name))
    regret = truth[best] - truth[picked]
    rho = spearman([scores[n] for n in names], [truth[n] for n in names])
    return Judgement(picked, best, regret == 0.0, regret, rho)


def summary(judgements: Sequence[Judgement], seconds: Sequence[float]) -> dict[str, float]:
    n = len(judgements)
    return {
        "accuracy": sum(j.hit for j in judgements) / n,
        "mean_regret": sum(j.regret for j in judgements) / n,
        "max_regret": max(j.regret for j in judgements),
        "mean_spearman": sum(j.rho for j in judgements) / n,
        "ms_per_decision": 1000 * sum(seconds) / len(seconds),
    }


def shortlisted(signature: dict[str, float], evaluation: dict[str, float], keep: int) -> dict[str, float]:
    """Evaluate only the ``keep`` drafts nearest by signature; the rest rank last, tied."""
    nearest = sorted(signature, key=lambda name: (-signature[name], name))[:keep]
    return {name: evaluation[name] if name in nearest else float("-inf") for name in signature}


# ---------------------------------------------------------------- the experiment


@dataclass
class PooledDraft:
    model: Eagle3Draft
    signature: DomainSignature
    train_seconds: float


def tally(model: Eagle3Draft, requests: list[Sample]) -> Tally:
    report = evaluate_acceptance(model, list(iter_batches(requests, 16)), K)
    rounds = int(report["rounds"])  # type: ignore[call-overload]
    return Tally((float(report["acceptance_length"]) - 1.0) * rounds, rounds, len(requests))  # type: ignore[arg-type]


def build_pool(scratch: Eagle3Draft, a: list[Sample], b: list[Sample], work: Path,
               epochs: int) -> dict[str, PooledDraft]:
    """The pool: code, prose, a 50/50 mix (same size), an early code draft (a quarter, a quarter of the epochs)."""
    half_a, half_b = a[: len(a) // 2], b[: len(b) // 2]
    recipes = {"code": (a, epochs), "prose": (b, epochs), "mix": (half_a + half_b, epochs),
               "code-early": (a[: len(a) // 4], max(1, epochs // 4))}
    pool = {}
    for name, (data, n_epochs) in recipes.items():
        model, seconds = trained(scratch, data, work / name, n_epochs)
        signature = domain_signature((s.aux_hidden.numpy() for s in data), scratch.cfg.target_hidden_size)
        assert signature is not None
        pool[name] = PooledDraft(model, signature, seconds)
    return pool


def decide(pool: dict[str, PooledDraft], requests: list[Sample],
           keep: int) -> dict[str, tuple[dict[str, float], float]]:
    """Each predictor's scores for the pool on these window requests, with its wall clock (seconds)."""
    hidden = next(iter(pool.values())).model.cfg.target_hidden_size
    t0 = time.perf_counter()
    window = domain_signature((s.aux_hidden.numpy() for s in requests), hidden)
    assert window is not None
    signature = {name: -signature_distance(d.signature, window) for name, d in pool.items()}
    signature_s = time.perf_counter() - t0
    evaluation, evaluation_s = {}, {}
    for name, d in pool.items():
        t0 = time.perf_counter()
        evaluation[name] = acceptance(d.model, list(iter_batches(requests, 16)))
        evaluation_s[name] = time.perf_counter() - t0
    short = shortlisted(signature, evaluation, keep)
    short_s = signature_s + sum(evaluation_s[name] for name, v in short.items() if v != float("-inf"))
    return {"signature": (signature, signature_s), "evaluation": (evaluation, sum(evaluation_s.values())),
            f"signature top-{keep}, then evaluation": (short, short_s)}


def windows(pool: dict[str, PooledDraft], truth: dict[float, dict[str, float]], pools: dict[int, tuple],
            keep: int) -> list[dict]:
    """Every (seed, share, n) decision with each predictor's pick and judgement."""
    out = []
    for seed, (pool_a, pool_b) in pools.items():
        for share in SHARES_A:
            rng = random.Random(seed * 1000 + round(share * 100))
            for n in SLICES:
                requests = window_slice(pool_a, pool_b, share, n, rng)
                for predictor, (scores, seconds) in decide(pool, requests, keep).items():
                    j = judge(scores, truth[share])
                    out.append({"seed": seed, "share_a": share, "n": n, "predictor": predictor,
                                "picked": j.picked, "best": j.best, "hit": j.hit, "regret": j.regret,
                                "rho": j.rho, "seconds": seconds})
    return out


def table(decisions: list[dict]) -> list[dict]:
    rows = []
    for predictor in dict.fromkeys(d["predictor"] for d in decisions):
        for n in SLICES:
            mine = [d for d in decisions if d["predictor"] == predictor and d["n"] == n]
            judged = [Judgement(d["picked"], d["best"], d["hit"], d["regret"], d["rho"]) for d in mine]
            rows.append({"predictor": predictor, "n": n, **summary(judged, [d["seconds"] for d in mine])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3, help="window seeds 1..N")
    parser.add_argument("--keep", type=int, default=2, help="drafts the signature shortlists for evaluation")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.manual_seed(0)
    started = time.monotonic()
    target_dir = ensure_tiny_target()
    target, tok, info = load_tiny_target(target_dir)

    def requests(domain: str, seed: int, shards: int) -> list[Sample]:
        return samples(capture(target, tok, info, domain, shards, seed=seed))

    t0 = time.monotonic()
    train = {d: requests(d, s, TRAIN_SHARDS) for d, s in TRAIN_SEEDS.items()}
    held_out = {d: requests(d, s, TRUTH_SHARDS) for d, s in TRUTH_SEEDS.items()}
    pools = {seed: tuple(requests(d, base + seed, WINDOW_REQUESTS // 16) for d, base in WINDOW_SEED_BASE.items())
             for seed in range(1, args.seeds + 1)}
    capture_s = time.monotonic() - t0
    progress(started, f"captured in {capture_s:.0f} s")
    scratch = fresh_draft(target_dir, target_draft_config(target_dir, [1, 2, 3], None), [], seed=0)
    with tempfile.TemporaryDirectory() as work:  # fit() resumes from a checkpoint left in its work dir
        pool = build_pool(scratch, train["code"], train["prose"], Path(work), args.epochs)
    progress(started, "pool trained")
    tallies = {name: (tally(d.model, held_out["code"]), tally(d.model, held_out["prose"])) for name, d in pool.items()}
    truth = {share: {name: mixed_acceptance(a, b, share) for name, (a, b) in tallies.items()} for share in SHARES_A}
    progress(started, "truth measured")
    decisions = windows(pool, truth, pools, args.keep)
    result = {"truth": {str(s): t for s, t in truth.items()}, "table": table(decisions), "decisions": decisions,
              "meta": {"k": K, "epochs": args.epochs, "window_seeds": list(pools), "keep": args.keep,
                       "train_requests": {d: len(r) for d, r in train.items()},
                       "truth_requests": {d: len(r) for d, r in held_out.items()},
                       "train_seconds": {n: round(d.train_seconds, 1) for n, d in pool.items()},
                       "capture_seconds": round(capture_s, 1), "target": info["revision"],
                       "torch_threads": torch.get_num_threads(),
                       "total_seconds": round(time.monotonic() - started, 1)}}
    report(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


def progress(started: float, what: str) -> None:
    print(f"[{time.monotonic() - started:6.0f} s] {what}", file=sys.stderr, flush=True)


def report(result: dict) -> None:
    names = list(next(iter(result["truth"].values())))
    print(f"true acceptance length (K={K}) on {result['meta']['truth_requests']} held-out requests, by share of A")
    print("  share A  " + "  ".join(f"{n:>10}" for n in names) + "  best (margin)")
    for share, t in result["truth"].items():
        ordered = sorted(t.values(), reverse=True)
        best = max(t, key=lambda n: (t[n], n))
        print(f"  {float(share):7.1f}  " + "  ".join(f"{t[n]:10.3f}" for n in names)
              + f"  {best} (+{ordered[0] - ordered[1]:.3f})")
    windows_n = len(result["meta"]["window_seeds"]) * len(SHARES_A)
    print(f"\npredictors over {windows_n} windows per n (seeds {result['meta']['window_seeds']})")
    print(f"  {'predictor':<38} {'n':>3}  {'accuracy':>8}  {'regret':>6}  {'max':>6}  {'spearman':>8}  {'ms':>7}")
    for r in result["table"]:
        print(f"  {r['predictor']:<38} {r['n']:>3}  {r['accuracy']:8.2f}  {r['mean_regret']:6.3f}  "
              f"{r['max_regret']:6.3f}  {r['mean_spearman']:8.2f}  {r['ms_per_decision']:7.1f}")
    print(f"\n{json.dumps(result['meta'])}")


if __name__ == "__main__":
    main()
