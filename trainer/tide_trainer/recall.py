"""`tide_trainer recall`: score the served draft and the pooled drafts on the traffic since a shift.

The draft pool (issue 16) keeps drafts that won on a domain once. When traffic shifts, the operator
asks this evaluation first: each draft's acceptance length, estimated the way a training run judges
its candidate (objective.evaluate_acceptance, the same K), on the same newest captured tokens. The
report (tide_contracts.recall.RecallReport) goes to ``candidates/<run_id>/recall.json``; nothing else
is written, nothing is trained. The operator recalls the best pooled draft when it beats the served
one by the canary's margin, and trains otherwise.

Every captured request counts (no held-out split): the pooled drafts were trained before the shift.
A served draft promoted since the shift may have trained on some of them, which can only favour
keeping it. A draft that cannot be loaded, verified or fitted to the shards is skipped and logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from tide_contracts.recall import RecallReport, RecallScore
from tide_contracts.shards import HiddenStateShard
from tide_trainer.candidate import CANDIDATES_DIR
from tide_trainer.config import RecallConfig
from tide_trainer.data import (
    DataExpectations,
    IncompatibleDataError,
    NoDataError,
    Sample,
    ShardSource,
    check_captured_from,
    check_fits_draft,
    iter_batches,
    read_checked,
    request_slices,
)
from tide_trainer.model import DraftConfig
from tide_trainer.objective import evaluate_acceptance
from tide_trainer.recall_drafts import DraftUnavailable, load_pooled_draft
from tide_trainer.run import open_source
from tide_trainer.storage import check_bucket, join_key, parse_s3_uri, s3_client, upload_files

log = logging.getLogger(__name__)
NO_SPECULATION = 1.0  # the served "acceptance length" while nothing is served: one token per target step


class NoDraftError(RuntimeError):
    """Nothing to compare: the served draft, or every pooled draft, could not be scored (exit 9)."""


@dataclass
class RecallOutcome:
    report: RecallReport
    uri: str
    skipped: dict[str, str]  # version -> why it was not scored


def run_recall(cfg: RecallConfig) -> RecallOutcome:
    """Read the newest captures, score every draft on them, write the report; NoDraftError when nothing compares."""
    bucket, prefix = parse_s3_uri(cfg.registry)
    client = s3_client()
    check_bucket(client, bucket)  # before any download: an unreachable registry fails first (exit 6)
    shards = newest_shards(open_source(cfg.shards, cfg.shard_claim), cfg.max_eval_tokens, cfg.target_revision,
                           cfg.tokenizer_hash)
    samples = eval_samples(shards, cfg.max_seq_len, cfg.max_eval_tokens)
    scorer = DraftScorer(cfg, shards, samples)
    served = scorer.score(*cfg.served) if cfg.served else NO_SPECULATION
    if served is None:
        raise NoDraftError(f"the served draft cannot be scored, so nothing compares with it: "
                           f"{next(iter(scorer.skipped.values()))}")
    scores = [RecallScore(version=v, acceptance_length=s) for v, src in cfg.pooled
              if (s := scorer.score(v, src)) is not None]
    if not scores:
        raise NoDraftError(f"no pooled draft could be scored: {scorer.skipped}")
    report = RecallReport(run_id=cfg.run_id, target_revision=cfg.target_revision,
                          served_version=cfg.served[0] if cfg.served else None, served_acceptance_length=served,
                          scores=tuple(scores), eval_tokens=sum(int(s.labels.shape[0]) for s in samples),
                          captured_since=cfg.captured_since)
    path = cfg.report_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.model_dump_json(indent=2) + "\n")
    # the report alone, with the Job's TIDE_S3_SSE settings like every trainer write
    (key,) = upload_files(client, bucket, join_key(prefix, CANDIDATES_DIR, cfg.run_id), [path])
    return RecallOutcome(report, f"s3://{bucket}/{key}", scorer.skipped)


class DraftScorer:
    """Each draft's acceptance length on the same batches, with training's estimate and K."""

    def __init__(self, cfg: RecallConfig, shards: list[HiddenStateShard], samples: list[Sample]) -> None:
        self.cfg, self.shards = cfg, shards
        self.device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        self.batches = [b.to(self.device, torch.float32) for b in iter_batches(samples, cfg.batch_size)]
        self.skipped: dict[str, str] = {}

    def score(self, version: str, source: str) -> float | None:
        """The draft's acceptance length, or None (logged, in ``skipped``) when it cannot be scored."""
        try:
            model = load_pooled_draft(version, source, Path(self.cfg.work_dir),
                                      target_revision=self.cfg.target_revision, tokenizer_hash=self.cfg.tokenizer_hash)
            self._check_fits(version, model.cfg)
        except DraftUnavailable as e:
            log.warning("skipping %s", e)
            self.skipped[version] = str(e)
            return None
        # One draft in memory at a time: drafts with large vocabularies would not all fit at once.
        evaluation = evaluate_acceptance(model.to(self.device), self.batches, self.cfg.speculative_tokens)
        if not evaluation["rounds"]:  # the same for every draft: no request has K tokens after its first
            raise NoDataError(f"the captured requests are too short to draft K={self.cfg.speculative_tokens} "
                              "tokens even once: nothing to score")
        length = float(evaluation["acceptance_length"])  # type: ignore[arg-type]
        log.info("draft %s: acceptance length %.3f over %s rounds", version, length, evaluation["rounds"])
        return length

    def _check_fits(self, version: str, draft_cfg: DraftConfig) -> None:
        """The draft reads these shards (hidden size, auxiliary layers, vocabulary)."""
        expect = DataExpectations.for_draft(draft_cfg, self.cfg.target_revision, self.cfg.tokenizer_hash)
        try:
            for i, shard in enumerate(self.shards):
                check_fits_draft(shard, expect, f"#{i}")
        except IncompatibleDataError as e:
            raise DraftUnavailable(f"draft {version} does not fit the captured shards: {e}") from e


def newest_shards(source: ShardSource, max_tokens: int, target_revision: str,
                  tokenizer_hash: str | None) -> list[HiddenStateShard]:
    """The newest shards holding ``max_tokens`` tokens (oldest first): only what is scored is read.

    A shard of another target or tokenizer is the data's fault, not a draft's (exit 5, as in training).
    """
    refs = sorted(source.list_shards(), key=lambda r: (r.modified, r.name))
    shards: list[HiddenStateShard] = []
    tokens = 0
    for ref in reversed(refs):
        if tokens >= max_tokens:
            break
        shard = read_checked(source, ref)
        check_captured_from(shard, target_revision, tokenizer_hash, ref.name)
        shards.append(shard)
        tokens += shard.num_tokens
    if not shards:
        raise NoDataError("shards: nothing captured to score the drafts on")
    return shards[::-1]


def eval_samples(shards: list[HiddenStateShard], max_seq_len: int, max_tokens: int) -> list[Sample]:
    """Every request's slices, newest first, cut at ``max_tokens`` rows in all."""
    kept: list[Sample] = []
    left = max_tokens
    for s in reversed(list(request_slices(shards, max_seq_len))):
        if left <= 0:
            break
        n = min(left, int(s.labels.shape[0]))
        kept.append(s if n == s.labels.shape[0] else Sample(s.aux_hidden[:n], s.labels[:n], s.target_mask[:n],
                                                            s.request))
        left -= n
    return kept
