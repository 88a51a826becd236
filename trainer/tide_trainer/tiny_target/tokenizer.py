"""A 512-token byte-level BPE tokenizer, trained locally on both domains; saved as HF tokenizer.json.

Byte-level means no unknown tokens on any text; 512 = 256 bytes + 1 special + 255 merges. vLLM and
transformers load it through tokenizer.json + tokenizer_config.json (PreTrainedTokenizerFast).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 512
EOS = "<|endoftext|>"  # also BOS; id 0


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"tokenizer: got {tok.get_vocab_size()} tokens, wanted {vocab_size}")
    return tok


def save_tokenizer(tok: Tokenizer, out_dir: Path, max_length: int) -> Path:
    path = out_dir / "tokenizer.json"
    tok.save(str(path))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS, "eos_token": EOS,
        "model_max_length": max_length, "clean_up_tokenization_spaces": False}, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps({"bos_token": EOS, "eos_token": EOS}) + "\n")
    return path


def tokenizer_hash(model_dir: Path) -> str:
    """The shard and manifest contracts' tokenizer_hash: sha256 of tokenizer.json."""
    return hashlib.sha256((model_dir / "tokenizer.json").read_bytes()).hexdigest()
