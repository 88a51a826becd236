"""The launch draft of the whole-loop demo: an EAGLE-3 draft trained on domain "code" only.

Built once with the real trainer command line, from shards the tiny target captures in plain torch
(tiny_target.capture, the serving plugin's shard format), and cached beside the target. It is good
on code and weaker on prose: the shift the control loop has to repair.

    python -m tide_trainer.tiny_target.launch_draft     # prints the directory (builds it if absent)
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from tide_trainer.cli import ExitCode, main
from tide_trainer.tiny_target.build import ensure_tiny_target, load_tiny_target
from tide_trainer.tiny_target.capture import CaptureSettings, write_domain_shards

log = logging.getLogger(__name__)
DRAFT_NAME = "code-v1"
DOMAIN = "code"
SPECULATIVE_TOKENS = 3
# 16 shards x 16 requests x 128 rows of code, 30 epochs: about a minute on 2 cores.
SHARDS, EPOCHS, SEED = 16, 30, 1


def launch_draft_dir(target_dir: Path) -> Path:
    return target_dir.parent / f"{target_dir.name}-drafts" / DRAFT_NAME


def ensure_launch_draft(target_dir: Path | None = None) -> Path:
    """The cached launch draft (speculators format + eval.json), trained first if absent."""
    target_dir = target_dir or ensure_tiny_target()
    out = launch_draft_dir(target_dir)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        work = Path(tmp)
        target, tok, info = load_tiny_target(target_dir)
        write_domain_shards(target, tok, info, domain=DOMAIN, out_dir=work / "shards", shards=SHARDS,
                            settings=CaptureSettings(seed=SEED))
        code = main(["train", "--shards", str(work / "shards"), "--target-model", str(target_dir),
                     "--target-revision", str(info["revision"]), "--work-dir", str(work / "train"),
                     "--ttt-steps", str(SPECULATIVE_TOKENS), "--speculative-tokens", str(SPECULATIVE_TOKENS),
                     "--epochs", str(EPOCHS), "--lr", "0.002", "--verifier-name", str(target_dir),
                     "--log-every", "50"])
        if code != ExitCode.OK:
            raise RuntimeError(f"training the launch draft failed: trainer exit {code}")
        staged = work / "train" / "candidate"
        report = json.loads((staged / "eval.json").read_text())
        log.info("launch draft: held-out acceptance length %.3f on %s",
                 report["candidate"]["acceptance_length"], DOMAIN)
        if out.exists():  # another process won the race
            return out
        os.replace(staged, out)
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(ensure_launch_draft())
