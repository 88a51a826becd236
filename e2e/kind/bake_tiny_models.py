"""Bake the engine tier's tiny Llama target and its good EAGLE-3 draft into the kind serving image.

Runs at image build (serving-tiny.Dockerfile), where torch, tokenizers and tide_serving are installed.
The target computes a fixed bigram map and the draft predicts it from the target's hidden states
(tide_serving.testing.tiny_models), so acceptance is real and predictable without any model download.
Stable paths, so that tidedeployment.yaml does not depend on tiny_models' cache layout.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

TARGET_DIR = "tiny-llama"
DRAFT_DIR = "tiny-llama-eagle3"


def bake(out: Path) -> None:
    from tide_serving.testing.tiny_models import build_tiny_models

    build = out / ".build"
    models = build_tiny_models(root=build)
    shutil.copytree(models.target, out / TARGET_DIR)
    shutil.copytree(models.good_draft, out / DRAFT_DIR)
    shutil.rmtree(build)


if __name__ == "__main__":
    bake(Path(sys.argv[1] if len(sys.argv) > 1 else "/models"))
