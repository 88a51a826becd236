# GPU serving image for AMD classes: vLLM's ROCm build of the OpenAI-compatible server plus the TIDE
# serving plugin (the operator picks it by the inference class's vendor: serving.vendorImages.amd).
# NVIDIA classes use images/serving.Dockerfile; everything below the FROM is the same.
#
#   hack/build-images.sh serving-rocm    # ghcr.io/tide-operator/vllm-tide-rocm:<TIDE_VERSION>
#
# Build args (hack/build-images.sh passes them from contracts/tide_contracts/versions.py, the one
# version story; the defaults here must agree, tests/unit/test_version_story.py checks)
#   VLLM_IMAGE    base image repository (default vllm/vllm-openai-rocm, vLLM's ROCm release images); a
#                 ROCm base of AMD's (rocm/vllm) works when it carries the same vLLM version
#   VLLM_VERSION  vLLM version, the base image's tag without its "v". The plugin reaches into vLLM
#                 internals and gates itself by version (tide_serving/engine_support.py): it accepts
#                 only the version it was tested on; on any other it stays inert and says so in its logs,
#                 in /tide/v1/status and in tide_serving_plugin_info{engine_supported}. The build fails
#                 when the base's vLLM is not this version.
#   TIDE_EXTRAS   pip extras installed with the package (default "serving": safetensors, numpy, boto3;
#                 never the operator's dependencies).
#
# The operator renders the pod's arguments; a pod runs, for example:
#   vllm serve <target> --served-model-name <name> \
#     --speculative-config '{"method":"eagle3","model":"<draft dir or s3://>","num_speculative_tokens":3}' \
#     --worker-extension-cls tide_serving.worker_extension.TideWorkerExtension \
#     --scheduler-cls tide_serving.scheduler.SpeculationSwitchAsyncScheduler
# with TIDE_CONTROL_TOKEN from a Secret and the TIDE_* / AWS_* variables of docs/contracts/serving-control.md.
ARG VLLM_IMAGE=vllm/vllm-openai-rocm
ARG VLLM_VERSION=0.32.0
FROM ${VLLM_IMAGE}:v${VLLM_VERSION}

ARG VLLM_VERSION
ARG TIDE_EXTRAS=serving
WORKDIR /opt/tide
# The project is one distribution with a package root per part; only the serving extra's
# dependencies are installed, so the operator/trainer code ships inert without its dependencies.
COPY pyproject.toml ./
COPY contracts ./contracts
COPY serving ./serving
COPY operator ./operator
COPY trainer ./trainer
COPY e2e ./e2e
RUN python3 -m pip install --no-cache-dir ".[${TIDE_EXTRAS}]" \
 && python3 -c "import tide_serving.control_plugin, tide_serving.worker_extension, tide_serving.scheduler" \
 && python3 -c "import sys, vllm; v = vllm.__version__.split('+')[0]; sys.exit(None if v == '${VLLM_VERSION}' else f'vLLM {v}, want ${VLLM_VERSION}')"

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
