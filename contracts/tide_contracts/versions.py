"""The one version story: what the images are tagged, which vLLM and PyTorch they are built on.

Everything else reads these values rather than repeating them: the operator config's default
images (tide_operator.config), the serving plugin's engine gate (tide_serving.engine_support),
``hack/build-images.sh`` (it parses the simple assignments below and passes them to the
Dockerfiles as build args). The chart's values.yaml, the Dockerfiles' ARG defaults, pyproject's
version and Chart.yaml's appVersion are plain text that cannot import this module:
tests/unit/test_version_story.py fails when any of them disagrees.

Keep every assignment on one line, ``NAME = "value"`` (the build script reads them with sed).
"""

from __future__ import annotations

TIDE_VERSION = "0.1.0"
"""The project's version: every image's tag, pyproject's version and the chart's appVersion."""
IMAGE_REGISTRY = "ghcr.io/tide-operator"
"""Where hack/build-images.sh pushes and the chart's defaults pull from."""

VLLM_VERSION = "0.32.0"
"""The vLLM every serving image is built on, and the only one the plugin's engine gate accepts
without TIDE_ALLOW_UNTESTED_VLLM: move it only after the engine tier (tests/engine) passed there."""
VLLM_CUDA_IMAGE = "vllm/vllm-openai"
"""NVIDIA serving base; its tag is ``v<VLLM_VERSION>``."""
VLLM_ROCM_IMAGE = "vllm/vllm-openai-rocm"
"""AMD serving base (vLLM's ROCm build); its tag is ``v<VLLM_VERSION>``. The build checks the vLLM
it finds, so another ROCm base (AMD's rocm/vllm) must carry the same vLLM version."""

TORCH_CUDA_IMAGE = "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
"""NVIDIA trainer base (PyTorch's CUDA runtime image)."""
TORCH_ROCM_IMAGE = "rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.7.1"
"""AMD trainer base (PyTorch's ROCm build; torch.cuda reports HIP devices there)."""

# Image repositories under IMAGE_REGISTRY, one per part and vendor (hack/build-images.sh builds them).
SERVING_REPOSITORY = "vllm-tide"
SERVING_ROCM_REPOSITORY = "vllm-tide-rocm"
SERVING_CPU_REPOSITORY = "vllm-tide-cpu"
TRAINER_REPOSITORY = "tide-trainer"
TRAINER_ROCM_REPOSITORY = "tide-trainer-rocm"
OPERATOR_REPOSITORY = "tide-operator"


def image(repository: str) -> str:
    """``<registry>/<repository>:<TIDE_VERSION>``: what hack/build-images.sh tags by default."""
    return f"{IMAGE_REGISTRY}/{repository}:{TIDE_VERSION}"
