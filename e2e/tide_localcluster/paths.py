"""Where the local cluster keeps its cache (built binaries) and its state (one running plane)."""

from __future__ import annotations

import os
from pathlib import Path

KUBE_VERSION = "1.20.2"
REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-kube.sh"
DEFAULT_POOLS = Path(__file__).resolve().parent / "pools" / "default.yaml"
DEFAULT_IMAGES = Path(__file__).resolve().parent / "images_catalog" / "default.yaml"


def cache_dir() -> Path:
    """Outside the checkout and keyed by version, so every clone and CI run reuses one build."""
    return Path(os.environ.get("TIDE_CACHE", Path.home() / ".cache" / "tide"))


def kube_bin_dir() -> Path:
    return cache_dir() / "kubernetes" / f"v{KUBE_VERSION}" / "bin"


def default_state_dir() -> Path:
    return Path(os.environ.get("TIDE_LOCALCLUSTER_STATE", f"/tmp/tide-localcluster-{os.getuid()}"))  # noqa: S108
