"""The draft's TTT unroll equals drafting step by step the way vLLM does it, and the loss and metrics hold."""

from __future__ import annotations

import math

import pytest
import torch
from synthetic_shards import tiny_draft_config

from tide_trainer.data import Batch
from tide_trainer.model import Eagle3Draft, apply_rope, rope_tables
from tide_trainer.objective import engine_rounds, evaluate_acceptance, served_acceptance_length, ttt_loss


def _draft(**overrides: object) -> Eagle3Draft:
    torch.manual_seed(0)
    model = Eagle3Draft(tiny_draft_config(**overrides))
    for p in model.parameters():  # non-trivial norms, so a wrong norm placement shows
        torch.nn.init.normal_(p, std=0.3) if p.dim() == 2 else torch.nn.init.uniform_(p, 0.5, 1.5)
    return model


def _reference_chain(model: Eagle3Draft, aux: torch.Tensor, tokens: torch.Tensor, anchor: int,
                     steps: int) -> list[torch.Tensor]:
    """Drafting after the target verified `anchor`: one token at a time with a KV list (no batching tricks).

    aux [T, 3H], tokens [T + steps - 1]; returns the logits of each draft step for this anchor.
    """
    cfg, layer = model.cfg, model.layers[0]
    attn = layer.self_attn
    keys, values = [], []

    def one(embed: torch.Tensor, hidden: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([layer.input_layernorm(embed), layer.hidden_norm(hidden)], -1)  # [2H]
        q = attn.q_proj(x).view(cfg.num_attention_heads, cfg.head_dim)
        k = attn.k_proj(x).view(cfg.num_key_value_heads, cfg.head_dim)
        v = attn.v_proj(x).view(cfg.num_key_value_heads, cfg.head_dim)
        cos, sin = rope_tables(torch.tensor([[pos]]), cfg.head_dim, cfg.rope_theta)
        q = apply_rope(q[None, :, None], cos, sin)[0, :, 0]
        k = apply_rope(k[None, :, None], cos, sin)[0, :, 0]
        keys.append(k)
        values.append(v)
        K = torch.stack(keys, 1).repeat_interleave(2, 0)  # [nh, n, hd]
        V = torch.stack(values, 1).repeat_interleave(2, 0)
        w = torch.softmax((K @ q[:, :, None]).squeeze(-1) / math.sqrt(cfg.head_dim), -1)  # [nh, n]
        o = attn.o_proj((w[:, :, None] * V).sum(1).reshape(-1))
        residual = o + hidden
        out = layer.mlp(layer.post_attention_layernorm(residual)) + residual
        return model.lm_head(model.norm(out)), out

    for t in range(anchor):  # the context: step-0 KV of earlier positions
        one(model.embed_tokens(tokens[t]), model.fc(aux[t]), t)
    logits, hidden = one(model.embed_tokens(tokens[anchor]), model.fc(aux[anchor]), anchor)
    out = [logits]
    for i in range(1, steps):
        logits, hidden = one(model.embed_tokens(tokens[anchor + i]), hidden, anchor + i)
        out.append(logits)
    return out


def test_ttt_unroll_matches_step_by_step_drafting() -> None:
    model = _draft()
    T, steps = 7, 3
    aux = torch.randn(1, T, 3 * model.cfg.target_hidden_size)
    tokens = torch.randint(0, model.cfg.vocab_size, (1, T + steps - 1))
    with torch.no_grad():
        unrolled = model.unroll(aux, tokens, steps)
        for anchor in (0, 3, T - 1):
            ref = _reference_chain(model, aux[0], tokens[0], anchor, steps)
            for i in range(steps):
                torch.testing.assert_close(unrolled[i][0, anchor], ref[i], rtol=1e-4, atol=1e-4)


def test_shapes_and_reduced_vocab_mapping() -> None:
    model = _draft(draft_vocab_size=16)
    model.d2t.copy_(torch.arange(16) * 3)  # draft id i -> target id 4i
    logits = model.unroll(torch.randn(2, 5, 3 * 32), torch.zeros(2, 6, dtype=torch.long), 2)
    assert [tuple(x.shape) for x in logits] == [(2, 5, 16)] * 2
    assert model.draft_to_target(torch.tensor([0, 1, 15])).tolist() == [0, 4, 60]
    assert model.target_to_draft(torch.tensor([4, 5, 60])).tolist() == [1, -1, 15]


def _batch(labels: torch.Tensor, width: int = 96) -> Batch:
    return Batch(torch.randn(*labels.shape, width), labels, torch.ones_like(labels, dtype=torch.bool))


def test_loss_weights_decay_and_masks_padding() -> None:
    model = _draft().requires_grad_(False)
    labels = torch.randint(0, 64, (2, 6))
    batch = _batch(labels)
    one = ttt_loss(model, batch, 1)
    three = ttt_loss(model, batch, 3, decay=0.5)
    weighted = sum(0.5**i * ce for i, ce in enumerate(three.per_step))
    assert math.isclose(three.loss.item(), weighted, rel_tol=1e-5)
    assert math.isclose(three.per_step[0], one.loss.item(), rel_tol=1e-5)  # step 0 does not see later steps
    assert one.tokens == 2 * 5  # the last row has no next target
    global_count = ttt_loss(model, batch, 3, decay=0.5, normaliser=10.0)  # DDP: every step over one count
    sums = [ce * n for ce, n in zip(three.per_step, (10, 8, 6), strict=True)]
    weighted = sum(0.5**i * s / 10 for i, s in enumerate(sums))
    assert math.isclose(global_count.loss.item(), weighted, rel_tol=1e-5)
    masked = Batch(batch.aux_hidden, labels, torch.zeros_like(batch.target_mask))
    assert ttt_loss(model, masked, 2).loss.item() == 0.0


def test_acceptance_length_of_a_perfect_and_a_hopeless_draft() -> None:
    model = _draft()
    labels = torch.randint(0, 64, (3, 10))
    batch = _batch(labels)
    k = 3
    perfect = evaluate_acceptance(_Oracle(model, labels), [batch], k)
    assert perfect["acceptance_length"] == k + 1
    assert perfect["anchors"] == 3 * (10 - k)
    assert perfect["rounds"] == 3 * 2  # anchors 0 and 4 of each row; anchor 8 has no 3 targets ahead
    assert perfect["accepted_prefix_rate_per_position"] == [1.0, 1.0, 1.0]
    hopeless = evaluate_acceptance(_Oracle(model, labels, wrong_from=0), [batch], k)
    assert hopeless["acceptance_length"] == 1.0
    second_wrong = evaluate_acceptance(_Oracle(model, labels, wrong_from=1), [batch], k)
    assert second_wrong["acceptance_length"] == 2.0
    assert second_wrong["top1_agreement_per_position"] == [1.0, 0.0, 0.0]


class _Oracle(Eagle3Draft):
    """Predicts the true next token at steps < wrong_from and a wrong one after."""

    def __init__(self, base: Eagle3Draft, labels: torch.Tensor, wrong_from: int = 99) -> None:
        super().__init__(base.cfg)
        self.labels, self.wrong_from = labels, wrong_from

    def unroll(self, aux_hidden: torch.Tensor, input_ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        _B, _T = self.labels.shape
        out = []
        for i in range(steps):
            target = torch.nn.functional.pad(self.labels[:, i + 1:], (0, i + 1))
            if i >= self.wrong_from:
                target = (target + 1) % self.cfg.vocab_size
            out.append(torch.nn.functional.one_hot(target, self.cfg.draft_vocab_size).float())
        return out


def test_served_acceptance_length_is_vllm_definition() -> None:
    assert served_acceptance_length([0.5, 0.7], 3) == 1 + 3 * 0.6
    assert served_acceptance_length([], 3) is None


def _walk(accepted: list[int], ok: int | None = None, first: int = 0, budget: int | None = None) -> list[int]:
    n = len(accepted)
    anchor_ok = torch.tensor([[t < (ok if ok is not None else n) for t in range(n)]])
    mask = torch.tensor([[t >= first for t in range(n)]])
    rounds = engine_rounds(torch.tensor([accepted]), anchor_ok, mask, budget)
    return rounds[0].nonzero().flatten().tolist()


def test_the_engine_drafts_after_the_accepted_tokens_from_the_first_generated_row() -> None:
    assert _walk([3, 0, 0, 0, 1, 0, 2, 0, 0, 1, 0]) == [0, 4, 6, 9]
    assert _walk([3, 0, 0, 0, 1, 0, 2, 0, 0, 1, 0], first=2) == [2, 3, 4, 6, 9]  # prompt rows are never anchors
    assert _walk([0] * 10, ok=4) == [0, 1, 2, 3]  # an anchor without K targets ahead ends the request
    assert _walk([1] * 10, budget=5) == [0, 2]  # 1 token from the prefill + 2 + 2: max_tokens reached


def test_hard_stretches_weigh_more_in_the_engine_than_in_the_all_anchor_mean() -> None:
    """An easy stretch is crossed in few rounds and a hard one in many: tokens per round, as vLLM counts
    it, is the walk's 1 + 9/15, not the all-anchor mean 1 + 36/24."""
    accepted = [3] * 12 + [0] * 12
    rounds = _walk(accepted)
    assert rounds == [0, 4, 8, *range(12, 24)]
    walked = 1 + sum(accepted[t] for t in rounds) / len(rounds)
    assert walked == pytest.approx(1.6)
    assert 1 + sum(accepted) / len(accepted) == pytest.approx(2.5)
