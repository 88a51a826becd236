"""What a loop on simulated vLLM pods needs to train for real: the simulator's capture shape, a seed
draft of that shape, and small trainer runs (used by the fast demo and the promotion tests).

The simulator writes shards in the trainer's format with synthetic but learnable rows; the real
`python -m tide_trainer train` warm-starts from the seed draft on them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tide_trainer.export import export_speculators
from tide_trainer.model import DraftConfig, Eagle3Draft

HIDDEN, VOCAB = 32, 64  # the simulator's capture model and the seed draft agree on these
CAPTURE = {"hidden_size": HIDDEN, "vocab_size": VOCAB, "aux_layer_ids": [1, 2, 3], "max_rows_per_request": 48}
# Small, quick training runs (CPU, two cores): a few dozen steps on the newest shards.
TRAINER_ARGS = ["--ttt-steps", "2", "--epochs", "2", "--max-steps", "40", "--lr", "0.01", "--batch-size", "8",
                "--eval-fraction", "0.2", "--window-shards", "8", "--log-every", "10"]


def seed_draft_files(out: Path) -> list[Path]:
    """An untrained EAGLE-3 draft in speculators format, shaped like the simulator's capture model."""
    torch.manual_seed(7)
    cfg = DraftConfig(vocab_size=VOCAB, draft_vocab_size=VOCAB, hidden_size=HIDDEN, target_hidden_size=HIDDEN,
                      intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      aux_layer_ids=[1, 2, 3])
    return export_speculators(Eagle3Draft(cfg), out, verifier="target", speculative_tokens=3)
