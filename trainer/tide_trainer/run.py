"""One training run from buffer to candidate: read, split, train, judge, export, upload.

The order matters for the promises in docs/contracts/trainer-cli.md: every check that can fail on bad
input runs before training, and nothing reaches the registry unless the candidate beat its baseline.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from tide_contracts.draft_pool import DomainSignature
from tide_contracts.shards import HiddenStateShard
from tide_contracts.signature import domain_signature
from tide_trainer.candidate import build_manifest, check_registry, upload_candidate
from tide_trainer.config import TrainConfig
from tide_trainer.data import (
    DataExpectations,
    LocalShardSource,
    NoDataError,
    Sample,
    ShardSource,
    iter_batches,
    load_window,
    split_samples,
)
from tide_trainer.export import export_speculators
from tide_trainer.model import Eagle3Draft
from tide_trainer.objective import evaluate_acceptance, served_acceptance_length
from tide_trainer.starting_point import (
    check_target_matches_parent,
    fetch_parent,
    fetch_target,
    fresh_draft,
    parent_draft,
    target_draft_config,
)
from tide_trainer.storage import ClaimedShardSource, S3ShardSource, is_s3_uri
from tide_trainer.train import fit

log = logging.getLogger(__name__)


@dataclass
class RunOutcome:
    report: dict[str, Any]
    better: bool
    candidate_uri: str | None


def open_source(uri: str, claim: str | None = None) -> ShardSource:
    if claim is not None:  # the operator's claim names the shards: read exactly those
        return ClaimedShardSource(uri, claim)
    return S3ShardSource(uri) if is_s3_uri(uri) else LocalShardSource(uri)


def run_training(cfg: TrainConfig) -> RunOutcome:
    work = Path(cfg.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    master = not dist.is_initialized() or dist.get_rank() == 0

    # 1. the registry can take a candidate, and the starting draft fixes what shards must look like
    if cfg.registry:  # on every rank: all fail alike instead of leaving peers waiting in DDP
        check_registry(cfg.registry, cfg.run_id)
    parent_dir = fetch_parent(cfg.parent_draft, work) if cfg.parent_draft else None
    target_dir = fetch_target(cfg.target_model, work) if cfg.target_model else None
    parent = parent_draft(parent_dir) if parent_dir else None
    if parent is not None:
        check_target_matches_parent(parent, target_dir)
    draft_cfg = parent.cfg if parent else target_draft_config(target_dir, cfg.aux_layer_ids,  # type: ignore[arg-type]
                                                              cfg.draft_vocab_size)

    # 2. the newest window of shards, checked, split by request
    expect = DataExpectations.for_draft(draft_cfg, cfg.target_revision, cfg.tokenizer_hash)
    shards = load_window(open_source(cfg.shards, cfg.shard_claim), cfg.window_shards, expect)
    train, held_out = split_samples(shards, cfg.eval_fraction, cfg.max_seq_len)
    if not train or not held_out:
        raise NoDataError(f"shards: {len(train)} training and {len(held_out)} held-out request slices; "
                          "need both (more requests, or another eval_fraction)")
    model = parent or fresh_draft(target_dir, draft_cfg, train, cfg.seed)  # type: ignore[arg-type]

    # 3. baseline on the held-out split, train, judge on the same split
    eval_batches = list(iter_batches(held_out, cfg.batch_size))
    parent_eval = evaluate_acceptance(model, eval_batches, cfg.speculative_tokens) if parent else None
    result = fit(model, train, cfg)
    if not master:
        return RunOutcome({}, better=False, candidate_uri=None)
    model.cpu()
    candidate_eval = evaluate_acceptance(model, eval_batches, cfg.speculative_tokens)
    report = build_report(cfg, candidate_eval, parent_eval, held_out=held_out, train=train,
                          num_shards=len(shards))
    report["training"] = {"steps": result.steps, "tokens": result.tokens, "seconds": round(result.seconds, 3),
                          "last_loss": result.last_loss}
    # The draft pool's key: what the draft learnt from (the training split), as statistics only.
    signature = domain_signature((s.aux_hidden.numpy() for s in train), model.cfg.target_hidden_size)
    return ship(cfg, model, report, shards, signature)


def ship(cfg: TrainConfig, model: Eagle3Draft, report: dict[str, Any],
         shards: list[HiddenStateShard], signature: DomainSignature | None = None) -> RunOutcome:
    """Export always (for inspection); upload only a better candidate, manifest last."""
    work = Path(cfg.work_dir)
    files = export_speculators(model, work / "candidate", verifier=cfg.verifier_name,
                               speculative_tokens=cfg.speculative_tokens, dtype=cfg.export_dtype)
    files.append(write_report(cfg.report_file, report, work / "candidate" / "eval.json"))
    better = bool(report["decision"]["better"])
    if not (better and cfg.registry):
        return RunOutcome(report, better, None)
    manifest = build_manifest(
        run_id=cfg.run_id, files=files, parent=cfg.parent_draft, target_revision=cfg.target_revision,
        tokenizer_hash=shards[-1].header.tokenizer_hash, samples=report["samples"],
        evaluation=report["decision"], draft=_draft_summary(model, cfg), training_window=_capture_window(shards),
        signature=signature)
    uri = upload_candidate(cfg.registry, cfg.run_id, files, manifest)
    log.info("uploaded candidate %s", uri)
    return RunOutcome(report, better, uri)


def build_report(cfg: TrainConfig, candidate: dict[str, Any], parent: dict[str, Any] | None, *,
                 held_out: list[Sample], train: list[Sample], num_shards: int) -> dict[str, Any]:
    """Evaluation report (docs/contracts/trainer-cli.md): candidate vs parent vs what serving saw."""
    rates = _served_rates(held_out)
    served = served_acceptance_length(rates, cfg.speculative_tokens)
    if parent is not None:
        baseline_name, baseline = "parent_draft", float(parent["acceptance_length"])
    elif served is not None:
        baseline_name, baseline = "served", served
    else:
        baseline_name, baseline = "no_speculation", 1.0
    cand = float(candidate["acceptance_length"])
    return {
        "report_version": 1,
        "run_id": cfg.run_id,
        "speculative_tokens": cfg.speculative_tokens,
        "candidate": candidate,
        "parent_draft": parent,
        "served": {"requests_with_rate": len(rates),
                   "acceptance_rate": sum(rates) / len(rates) if rates else None,
                   "acceptance_length": served},
        "decision": {"baseline": baseline_name, "baseline_acceptance_length": baseline,
                     "candidate_acceptance_length": cand, "min_improvement": cfg.min_improvement,
                     "better": cand > baseline + cfg.min_improvement},
        "samples": {"shards": num_shards,
                    "train_requests": len({s.request.request_id for s in train}),
                    "train_tokens": sum(int(s.labels.shape[0]) for s in train),
                    "eval_requests": len({s.request.request_id for s in held_out}),
                    "eval_tokens": sum(int(s.labels.shape[0]) for s in held_out)},
    }


def _served_rates(held_out: list[Sample]) -> list[float]:
    seen: dict[str, float] = {}
    for s in held_out:
        if s.request.served_acceptance_rate is not None:
            seen[s.request.request_id] = s.request.served_acceptance_rate
    return list(seen.values())


def _capture_window(shards: list[HiddenStateShard]) -> tuple[str, str]:
    times = sorted(s.header.created_at for s in shards)
    return times[0], times[-1]


def _draft_summary(model: Eagle3Draft, cfg: TrainConfig) -> dict[str, Any]:
    return {"method": "eagle3", "speculative_tokens": cfg.speculative_tokens,
            "aux_layer_ids": list(model.cfg.aux_layer_ids), "draft_vocab_size": model.cfg.draft_vocab_size,
            "target_hidden_size": model.cfg.target_hidden_size}


def write_report(path: Path, report: dict[str, Any], copy: Path) -> Path:
    text = json.dumps(report, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    copy.write_text(text)
    return copy
