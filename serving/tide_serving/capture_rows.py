"""Which rows of a verify step's forward pass belong to served tokens (pure; no vLLM import).

In one engine step each scheduled request contributes a contiguous block of rows to the target's
forward: its new prompt tokens (prefill) or its last sampled token followed by the K draft tokens
(decode with speculation). Draft rows after the first rejection never enter the sequence, so their
hidden states must not be captured. With `a` drafts accepted the sampler returns a+1 tokens (the
accepted drafts plus a bonus token), so the served rows of a decode block are the first a+1 rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ServedRows:
    """Rows [start, start + count) of the step's forward belong to request_id's sequence."""

    request_id: str
    start: int
    count: int
    sampled: tuple[int, ...]  # tokens the step emitted for the request (accepted drafts + bonus)


def served_rows(
    batch_order: Sequence[str],
    num_scheduled: Mapping[str, int],
    num_drafts: Mapping[str, int],
    sampled: Mapping[str, Sequence[int]],
) -> list[ServedRows]:
    """Served row blocks for one step, in forward order.

    batch_order: request ids in the order their rows appear in the forward pass;
    num_scheduled: rows scheduled per request (prompt or 1 + drafts);
    num_drafts: draft tokens scheduled per request (absent: none);
    sampled: tokens emitted per request this step (empty for a partial prefill chunk).
    """
    blocks: list[ServedRows] = []
    offset = 0
    for req_id in batch_order:
        scheduled = num_scheduled.get(req_id, 0)
        if scheduled <= 0:
            continue
        drafts = num_drafts.get(req_id, 0)
        if drafts > scheduled - 1 and drafts > 0:
            raise ValueError(f"request {req_id}: {drafts} drafts cannot fit in {scheduled} scheduled rows")
        emitted = tuple(sampled.get(req_id, ()))
        accepted = min(max(len(emitted) - 1, 0), drafts) if drafts else 0
        blocks.append(ServedRows(req_id, offset, scheduled - drafts + accepted, emitted))
        offset += scheduled
    return blocks


def row_indices(blocks: Sequence[ServedRows]) -> list[int]:
    """Flat forward-row indices of the given blocks (for one gather per step)."""
    return [i for b in blocks for i in range(b.start, b.start + b.count)]
