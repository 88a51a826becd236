"""Drafts of the tiny target trained on one domain: the whole-loop demo's launch draft and the tests'.

Built with the real trainer command line, from shards the tiny target captures in plain torch
(tiny_target.capture, the serving plugin's shard format), in a child process with pinned numerics
(tiny_target.pinned), and cached beside the target. The launch draft is trained on code only: good on
code and weaker on prose, the shift the control loop has to repair.

    python -m tide_trainer.tiny_target launch-draft     # prints the directory (builds it if absent)
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tide_trainer.candidate import sha256_file
from tide_trainer.cli import ExitCode, main
from tide_trainer.tiny_target.build import WEIGHTS, ensure_tiny_target, load_tiny_target
from tide_trainer.tiny_target.capture import CaptureSettings, write_domain_shards
from tide_trainer.tiny_target.pinned import expected_checksum, pin_torch, pinned_run, verify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DraftRecipe:
    """What a domain draft is trained on and for how long."""

    name: str
    domain: str = "code"
    shards: int = 16
    requests_per_shard: int = 16
    new_tokens: int = 96
    epochs: int = 30
    seed: int = 1
    speculative_tokens: int = 3
    lr: float = 0.002

    def capture(self) -> CaptureSettings:
        return CaptureSettings(requests_per_shard=self.requests_per_shard, new_tokens=self.new_tokens,
                               seed=self.seed)


# 16 shards x 16 requests x 128 rows of code, 30 epochs: about a minute on 2 cores.
LAUNCH_DRAFT = DraftRecipe("code-v1")


def launch_draft_dir(target_dir: Path) -> Path:
    return draft_dir(target_dir, LAUNCH_DRAFT)


def draft_dir(target_dir: Path, recipe: DraftRecipe) -> Path:
    return target_dir.parent / f"{target_dir.name}-drafts" / recipe.name


def ensure_launch_draft(target_dir: Path | None = None) -> Path:
    """The cached launch draft (speculators format + eval.json), trained first if absent."""
    return ensure_draft(target_dir or ensure_tiny_target(), LAUNCH_DRAFT)


def ensure_draft(target_dir: Path, recipe: DraftRecipe) -> Path:
    """The cached draft of `recipe`, trained first (in a pinned child) if absent or not as recorded."""
    out = draft_dir(target_dir, recipe)
    version = json.loads((target_dir / "build.json").read_text())["version"]
    artifact = f"{version}/{recipe.name}/{WEIGHTS}"
    expected = expected_checksum(artifact)
    if (out / "config.json").is_file() and (out / WEIGHTS).is_file() and \
            (expected is None or sha256_file(out / WEIGHTS) == expected):
        return out
    pinned_run(["draft", "--target", str(target_dir), "--recipe", json.dumps(recipe.__dict__)])
    verify(out / WEIGHTS, artifact)
    return out


def train_draft(target_dir: Path, recipe: DraftRecipe) -> Path:
    """In the pinned child: capture shards, run the trainer CLI, move the candidate into the cache."""
    pin_torch()
    out = draft_dir(target_dir, recipe)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        work = Path(tmp)
        target, tok, info = load_tiny_target(target_dir)
        write_domain_shards(target, tok, info, domain=recipe.domain, out_dir=work / "shards",
                            shards=recipe.shards, settings=recipe.capture())
        k = str(recipe.speculative_tokens)
        code = main(["train", "--shards", str(work / "shards"), "--target-model", str(target_dir),
                     "--target-revision", str(info["revision"]), "--work-dir", str(work / "train"),
                     "--ttt-steps", k, "--speculative-tokens", k, "--epochs", str(recipe.epochs),
                     "--lr", str(recipe.lr), "--verifier-name", str(target_dir), "--log-every", "50"])
        if code != ExitCode.OK:
            raise RuntimeError(f"training draft {recipe.name} failed: trainer exit {code}")
        staged = work / "train" / "candidate"
        report = json.loads((staged / "eval.json").read_text())
        log.info("draft %s: held-out acceptance length %.3f on %s", recipe.name,
                 report["candidate"]["acceptance_length"], recipe.domain)
        if out.exists():  # a stale or concurrent copy: the fresh build replaces it
            os.replace(out, work / "stale")
        os.replace(staged, out)
    return out
