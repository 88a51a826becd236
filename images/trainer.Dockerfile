# Trainer image for NVIDIA classes: the EAGLE-3 draft trainer (PyTorch, CUDA) that the operator runs
# as a Job on the training pool (docs/contracts/trainer-cli.md), non-root. AMD classes use
# images/trainer-rocm.Dockerfile (the operator picks by the training class's vendor).
#
#   hack/build-images.sh trainer         # ghcr.io/tide-operator/tide-trainer:<TIDE_VERSION>
#
# Build args (hack/build-images.sh passes them from contracts/tide_contracts/versions.py; the
# default here must agree, tests/unit/test_version_story.py checks)
#   TORCH_IMAGE  base with a CUDA build of PyTorch (PyTorch's CUDA runtime image).
ARG TORCH_IMAGE=pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime
FROM ${TORCH_IMAGE}

WORKDIR /opt/tide
COPY pyproject.toml README.md ./
COPY trainer ./trainer
COPY contracts ./contracts
COPY operator ./operator
COPY serving ./serving
COPY e2e ./e2e
# The base image's torch is kept (pip sees it satisfies the extra), so no second CUDA wheel is pulled.
RUN python -m pip install --no-cache-dir ".[trainer]" \
 && python -c "import torch, tide_trainer.cli" \
 && groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --create-home --shell /sbin/nologin nonroot \
 && mkdir -p /var/tide/train && chown 65532:65532 /var/tide/train
USER 65532:65532
ENV PYTHONUNBUFFERED=1 \
    HOME=/home/nonroot
# The operator passes the command (python -m tide_trainer train ... or torchrun ...).
ENTRYPOINT []
CMD ["python", "-m", "tide_trainer", "--help"]
