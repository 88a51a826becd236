"""Build (once) and cache the tiny target: tokenizer, a few minutes of CPU training, HF-style export.

The result lives outside the checkout under ${TIDE_CACHE:-~/.cache/tide}/models/<version>-<sha12>/ and
holds config.json, model.safetensors (HF Llama names, bf16), tokenizer files and build.json (settings,
losses, checksums). The build runs with pinned numerics (tiny_target.pinned), so its files are the
same on every x86-64 machine with this torch; the cache key carries the recorded checksum, and a
cached copy whose weights differ from it is rebuilt.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from tide_trainer.candidate import sha256_file
from tide_trainer.tiny_target.corpus import CODE, DOMAINS, PROSE
from tide_trainer.tiny_target.model import TinyLlama, TinyLlamaConfig
from tide_trainer.tiny_target.pinned import expected_checksum, pin_torch, pinned_run, platform_key, verify
from tide_trainer.tiny_target.progress import Progress
from tide_trainer.tiny_target.tokenizer import EOS, save_tokenizer, tokenizer_hash, train_tokenizer

log = logging.getLogger(__name__)
VERSION = "tiny-llama-v2"  # v2: built with pinned numerics


@dataclass(frozen=True)
class BuildSettings:
    steps: int = 1200  # about 3 minutes on 2 CPU cores
    batch_size: int = 16  # half code, half prose
    seq_len: int = 128
    lr: float = 3e-3  # cosine to 10% over the run, short warmup
    warmup: int = 30
    seed: int = 0


WEIGHTS = "model.safetensors"


def cache_dir(version: str = VERSION) -> Path:
    """Keyed by the recorded checksum: another build of the same version never shares a directory."""
    expected = expected_checksum(f"{version}/{WEIGHTS}")
    key = expected[:12] if expected else f"{platform_key()}-unrecorded"
    return Path(os.environ.get("TIDE_CACHE", "~/.cache/tide")).expanduser() / "models" / f"{version}-{key}"


def ensure_tiny_target(version: str = VERSION) -> Path:
    """The cached target directory, built first (in a pinned child process) if absent or not as recorded."""
    out = cache_dir(version)
    if _cached(out, version):
        return out
    pinned_run(["build", "--out", str(out)])
    verify(out / WEIGHTS, f"{version}/{WEIGHTS}")
    return out


def _cached(out: Path, version: str) -> bool:
    if not (out / "build.json").is_file():
        return False
    expected = expected_checksum(f"{version}/{WEIGHTS}")
    if expected and sha256_file(out / WEIGHTS) != expected:
        log.warning("%s: cached weights differ from the recorded checksum; rebuilding", out)
        return False
    return True


def build_pinned(out: Path, settings: BuildSettings | None = None) -> Path:
    """In the pinned child: build into a temporary sibling and rename (a half build is never used)."""
    pin_torch()
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp, settings or BuildSettings())
    if (out / "build.json").is_file() and sha256_file(out / WEIGHTS) == sha256_file(tmp / WEIGHTS):
        shutil.rmtree(tmp)  # another process built the same files first
        return out
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def domain_tokens(tok: Tokenizer, texts: list[str]) -> torch.Tensor:
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for text in texts:
        ids += [*tok.encode(text).ids, eos]
    return torch.tensor(ids, dtype=torch.long)


def get_lr(step: int, s: BuildSettings) -> float:
    if step < s.warmup:  # 1) linear warmup
        return s.lr * (step + 1) / s.warmup
    progress = (step - s.warmup) / max(1, s.steps - s.warmup)  # 2) cosine down to 10%
    return s.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def sample_batch(streams: list[torch.Tensor], s: BuildSettings, gen: torch.Generator) -> torch.Tensor:
    rows = []
    for b in range(s.batch_size):
        stream = streams[b % len(streams)]
        start = int(torch.randint(0, len(stream) - s.seq_len - 1, (1,), generator=gen))
        rows.append(stream[start:start + s.seq_len + 1])
    return torch.stack(rows)  # [B, T+1]


@torch.no_grad()
def held_out_loss(model: TinyLlama, stream: torch.Tensor, seq_len: int, windows: int = 16) -> float:
    n = min(windows, (len(stream) - 1) // seq_len)
    x = torch.stack([stream[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)])
    logits, _ = model(x[:, :-1])
    return float(F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()))


def build(out_dir: Path, s: BuildSettings) -> dict[str, object]:
    started = time.monotonic()
    (code_train, code_eval), (prose_train, prose_eval) = CODE.split(), PROSE.split()
    tok = train_tokenizer(code_train + prose_train)
    cfg = TinyLlamaConfig()
    train_streams = [domain_tokens(tok, code_train), domain_tokens(tok, prose_train)]
    eval_streams = {"code": domain_tokens(tok, code_eval), "prose": domain_tokens(tok, prose_eval)}

    torch.manual_seed(s.seed)
    model = TinyLlama(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(s.seed)
    progress = Progress("tiny target step", s.steps, emit=log.info)
    for step in range(s.steps):
        for group in opt.param_groups:
            group["lr"] = get_lr(step, s)
        batch = sample_batch(train_streams, s, gen)
        logits, _ = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if progress.due(step + 1):
            progress.report(step + 1, f"loss {loss.item():.3f}")

    model.eval()
    losses = {name: held_out_loss(model, stream, s.seq_len) for name, stream in eval_streams.items()}
    return export_target(model, tok, out_dir, s, losses=losses, seconds=time.monotonic() - started)


def export_target(model: TinyLlama, tok: Tokenizer, out_dir: Path, s: BuildSettings, *,
                  losses: dict[str, float], seconds: float) -> dict[str, object]:
    eos = tok.token_to_id(EOS)
    weights = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(out_dir / WEIGHTS), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(model.c.hf_config(eos, "bfloat16"), indent=2) + "\n")
    generation = {"bos_token_id": eos, "eos_token_id": eos}
    (out_dir / "generation_config.json").write_text(json.dumps(generation) + "\n")
    save_tokenizer(tok, out_dir, model.c.max_position_embeddings)
    weights_hash = sha256_file(out_dir / WEIGHTS)
    info: dict[str, object] = {
        "version": VERSION, "revision": f"{VERSION}-{weights_hash[:12]}",
        "tokenizer_hash": tokenizer_hash(out_dir), "settings": asdict(s),
        "corpus": {name: d.fingerprint for name, d in DOMAINS.items()},
        "held_out_loss": losses, "train_seconds": round(seconds, 1), "torch": torch.__version__,
        "sha256": {WEIGHTS: weights_hash, "tokenizer.json": sha256_file(out_dir / "tokenizer.json")},
    }
    (out_dir / "build.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def load_tiny_target(model_dir: Path) -> tuple[TinyLlama, Tokenizer, dict[str, object]]:
    """The cached target as a float32 torch model, its tokenizer and build info."""
    hf = json.loads((model_dir / "config.json").read_text())
    fields = TinyLlamaConfig.__dataclass_fields__
    model = TinyLlama(TinyLlamaConfig(**{k: v for k, v in hf.items() if k in fields}))
    model.load_state_dict({k: v.float() for k, v in load_file(str(model_dir / "model.safetensors")).items()})
    model.eval()
    info = json.loads((model_dir / "build.json").read_text())
    return model, Tokenizer.from_file(str(model_dir / "tokenizer.json")), info
