# Trainer image for AMD classes: the EAGLE-3 draft trainer on ROCm PyTorch (torch.cuda reports HIP
# devices), run by the operator as a Job when the training class's vendor is AMD
# (trainer.vendorImages.amd; docs/contracts/trainer-cli.md), non-root.
#
#   hack/build-images.sh trainer-rocm    # ghcr.io/tide-operator/tide-trainer-rocm:<TIDE_VERSION>
#
# Build args (hack/build-images.sh passes them from contracts/tide_contracts/versions.py; the
# default here must agree, tests/unit/test_version_story.py checks)
#   TORCH_IMAGE  base with a ROCm build of PyTorch (AMD's rocm/pytorch); the build fails on a CUDA one.
ARG TORCH_IMAGE=rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.7.1
FROM ${TORCH_IMAGE}

WORKDIR /opt/tide
COPY pyproject.toml README.md ./
COPY trainer ./trainer
COPY contracts ./contracts
COPY operator ./operator
COPY serving ./serving
COPY e2e ./e2e
# The base image's torch is kept (pip sees it satisfies the extra), so no CUDA wheel replaces ROCm's.
RUN python -m pip install --no-cache-dir ".[trainer]" \
 && python -c "import sys, torch, tide_trainer.cli; sys.exit(None if torch.version.hip else 'not a ROCm torch')" \
 && groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --create-home --shell /sbin/nologin nonroot \
 && mkdir -p /var/tide/train && chown 65532:65532 /var/tide/train
USER 65532:65532
ENV PYTHONUNBUFFERED=1 \
    HOME=/home/nonroot
# The operator passes the command (python -m tide_trainer train ... or torchrun ...).
ENTRYPOINT []
CMD ["python", "-m", "tide_trainer", "--help"]
