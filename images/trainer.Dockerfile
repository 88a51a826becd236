# Trainer image: the EAGLE-3 draft trainer (PyTorch) that the operator runs as a Job on the
# training pool (docs/contracts/trainer-cli.md), non-root.
#
#   docker build -f images/trainer.Dockerfile -t ghcr.io/tide-operator/tide-trainer:0.1.0 .
#   docker build -f images/trainer.Dockerfile --build-arg TORCH_IMAGE=rocm/pytorch:latest ... # AMD pools
#   hack/build-images.sh trainer
#
# Build args
#   TORCH_IMAGE  base with a GPU build of PyTorch (default: PyTorch's CUDA runtime image). The
#                training pool is often older or AMD GPUs: use a ROCm base there.
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
