"""What the draft is trained for and how it is judged: the TTT loss and the expected acceptance length.

Acceptance under greedy verification: draft token i counts only if tokens 0..i-1 were accepted, and then
the draft had read exactly the target's tokens. So a teacher-forced unroll gives the same accepted
prefix as drafting from the draft's own tokens, and one batched unroll measures it at every anchor.

The engine does not draft at every anchor: after a round that accepted a tokens it drafts next at
t + a + 1, so stretches the draft finds easy are crossed in few rounds and hard ones in many. Its mean
acceptance length (tokens per round) therefore weighs hard anchors more than an average over all
anchors does, and the all-anchor mean overstates it (by 0.25 on the tiny target, see
docs/contracts/trainer-cli.md). The estimate walks each request the way the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from tide_trainer.data import Batch
from tide_trainer.model import Eagle3Draft


@dataclass
class StepLosses:
    loss: torch.Tensor  # weighted sum over steps, what backward() sees
    per_step: list[float]  # unweighted cross-entropy per step, for logs
    tokens: int  # supervised anchor positions of step 0


def ttt_loss(model: Eagle3Draft, batch: Batch, steps: int, *, decay: float = 0.8,
             normaliser: float | None = None, forward: torch.nn.Module | None = None) -> StepLosses:
    """Sum over steps i of decay**i * cross-entropy(step i), on positions whose target is the target's choice.

    normaliser: divide token sums by this count instead of the local one (DDP passes the global count so
    that one process and many produce the same gradient). forward: the DDP wrapper of `model`, if any.
    """
    logits = (forward or model)(batch.aux_hidden, batch.step_inputs(steps), steps)
    total = batch.aux_hidden.new_zeros(())
    per_step, tokens = [], 0
    for i, step_logits in enumerate(logits):
        targets, valid = batch.step_targets(i)
        draft_targets = model.target_to_draft(targets)
        valid = valid & (draft_targets >= 0)  # a reduced draft vocabulary cannot predict the rest
        ce = F.cross_entropy(step_logits.flatten(0, 1).float(), draft_targets.clamp(min=0).flatten(),
                             reduction="none").view_as(targets)
        count = int(valid.sum())
        summed = (ce * valid).sum()
        tokens = count if i == 0 else tokens
        denom = normaliser if normaliser is not None else max(count, 1)
        total = total + decay**i * summed / denom
        per_step.append(float(summed.detach()) / max(count, 1))
    return StepLosses(total, per_step, tokens)


@dataclass
class AcceptanceStats:
    """Running sums over the rounds the engine would draft (an anchor with K target tokens ahead)."""

    k: int
    rounds: int = 0
    accepted_tokens: float = 0.0
    prefix_hits: list[float] = field(default_factory=list)  # rounds whose first i+1 drafts were accepted
    top1_hits: list[float] = field(default_factory=list)  # teacher-forced agreement per position
    top1_counts: list[float] = field(default_factory=list)
    anchors: int = 0  # every anchor with K target tokens ahead, for the all-anchor mean
    anchor_accepted: float = 0.0

    def __post_init__(self) -> None:
        self.prefix_hits = self.prefix_hits or [0.0] * self.k
        self.top1_hits = self.top1_hits or [0.0] * self.k
        self.top1_counts = self.top1_counts or [0.0] * self.k

    def report(self) -> dict[str, object]:
        n = max(self.rounds, 1)
        return {
            "speculative_tokens": self.k,
            "rounds": self.rounds,
            # tokens per target forward pass, bonus token included (vLLM's "mean acceptance length")
            "acceptance_length": 1.0 + self.accepted_tokens / n,
            "acceptance_rate": self.accepted_tokens / (n * self.k),
            "accepted_prefix_rate_per_position": [h / n for h in self.prefix_hits],
            "top1_agreement_per_position": [h / max(c, 1) for h, c in zip(self.top1_hits, self.top1_counts,
                                                                           strict=True)],
            "anchors": self.anchors,
            # the mean over every anchor: what the estimate was before it walked like the engine
            "acceptance_length_all_anchors": 1.0 + self.anchor_accepted / max(self.anchors, 1),
        }


@torch.no_grad()
def accepted_prefixes(model: Eagle3Draft, batch: Batch, k: int,
                      stats: AcceptanceStats | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """[K, B, T] whether drafts 0..i at anchor t were all accepted, and [B, T] anchors with K targets ahead."""
    logits = model.unroll(batch.aux_hidden, batch.step_inputs(k), k)
    hits, anchor_ok = [], torch.ones_like(batch.target_mask)
    for i, step_logits in enumerate(logits):
        targets, valid = batch.step_targets(i)
        hit = model.draft_to_target(step_logits.float().argmax(-1)) == targets  # [B, T]
        if stats is not None:
            stats.top1_hits[i] += float((hit & valid).sum())
            stats.top1_counts[i] += float(valid.sum())
        hits.append(hit)
        anchor_ok = anchor_ok & valid  # only anchors with K real target tokens ahead
    return torch.stack(hits).long().cumprod(0).bool() & anchor_ok, anchor_ok


def engine_rounds(accepted: torch.Tensor, anchor_ok: torch.Tensor, target_mask: torch.Tensor,
                  budget: int | None = None) -> torch.Tensor:
    """[B, T] the anchors the engine drafts at, given the accepted count at every anchor.

    A request's first round is at its first anchor whose token is the target's own (the last prompt
    row, where the engine's first generated token is fed back), the next at t + accepted + 1. The walk
    stops at an anchor without K targets ahead (the end of a request or slice) or, with a budget,
    once that many tokens were generated (the first one comes from the prefill, not from a round).
    """
    rounds = torch.zeros_like(anchor_ok)
    counts, ok, mask = accepted.tolist(), anchor_ok.tolist(), target_mask.tolist()
    for b, row in enumerate(counts):
        t = mask[b].index(True) if True in mask[b] else len(row)
        generated = 1
        while t < len(row) and ok[b][t] and (budget is None or generated < budget):
            rounds[b, t] = True
            generated += row[t] + 1
            t += row[t] + 1
    return rounds


def accumulate_acceptance(model: Eagle3Draft, batch: Batch, stats: AcceptanceStats,
                          budget: int | None = None) -> None:
    prefix, anchor_ok = accepted_prefixes(model, batch, stats.k, stats)
    accepted = prefix.sum(0)  # [B, T]
    stats.anchors += int(anchor_ok.sum())
    stats.anchor_accepted += float(accepted[anchor_ok].sum())
    rounds = engine_rounds(accepted, anchor_ok, batch.target_mask, budget)
    stats.rounds += int(rounds.sum())
    stats.accepted_tokens += float(accepted[rounds].sum())
    for i in range(stats.k):
        stats.prefix_hits[i] += float(prefix[i][rounds].sum())


def evaluate_acceptance(model: Eagle3Draft, batches: list[Batch], k: int,
                        budget: int | None = None) -> dict[str, object]:
    """The acceptance the engine would measure serving these requests with `model` (greedy verification)."""
    was_training = model.training
    model.eval()
    stats = AcceptanceStats(k)
    for batch in batches:
        accumulate_acceptance(model, batch, stats, budget)
    model.train(was_training)
    return stats.report()


def served_acceptance_length(rates: list[float], k: int) -> float | None:
    """Acceptance length serving observed: 1 + K * mean accepted/proposed rate (vLLM's definition)."""
    if not rates:
        return None
    return 1.0 + k * sum(rates) / len(rates)
