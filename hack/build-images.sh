#!/usr/bin/env bash
# Build the project's images where Docker (or Podman) exists:
#   hack/build-images.sh                 # operator, and serving and trainer for NVIDIA (CUDA) and AMD (ROCm)
#   hack/build-images.sh operator        # just one (operator | trainer | trainer-rocm | serving |
#                                        #   serving-rocm | serving-cpu)
#   hack/build-images.sh serving-cpu     # vLLM's CPU build + the plugin (kind e2e, no GPU)
# Versions come from one place, contracts/tide_contracts/versions.py (the tag, the vLLM every serving
# image is built on, the PyTorch bases); they reach the Dockerfiles as build args.
# Environment: REGISTRY (default: IMAGE_REGISTRY there), TAG (default: TIDE_VERSION there),
#   DOCKER (default: docker, else podman), PUSH=1 to push after building.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS=contracts/tide_contracts/versions.py
version_of() {  # NAME = "value" on one line of $VERSIONS
  local value
  value=$(sed -n "s/^$1 = \"\(.*\)\"\$/\1/p" "$VERSIONS" | head -1)
  [ -n "$value" ] || { echo "build-images: $1 missing from $VERSIONS" >&2; exit 2; }
  echo "$value"
}
VLLM_VERSION=$(version_of VLLM_VERSION)
REGISTRY=${REGISTRY:-$(version_of IMAGE_REGISTRY)}
TAG=${TAG:-$(version_of TIDE_VERSION)}

declare -A REPOSITORY=([operator]=$(version_of OPERATOR_REPOSITORY)
                       [trainer]=$(version_of TRAINER_REPOSITORY)
                       [trainer-rocm]=$(version_of TRAINER_ROCM_REPOSITORY)
                       [serving]=$(version_of SERVING_REPOSITORY)
                       [serving-rocm]=$(version_of SERVING_ROCM_REPOSITORY)
                       [serving-cpu]=$(version_of SERVING_CPU_REPOSITORY))
declare -A BUILD_ARGS=([operator]=""
                       [trainer]="TORCH_IMAGE=$(version_of TORCH_CUDA_IMAGE)"
                       [trainer-rocm]="TORCH_IMAGE=$(version_of TORCH_ROCM_IMAGE)"
                       [serving]="VLLM_IMAGE=$(version_of VLLM_CUDA_IMAGE) VLLM_VERSION=$VLLM_VERSION"
                       [serving-rocm]="VLLM_IMAGE=$(version_of VLLM_ROCM_IMAGE) VLLM_VERSION=$VLLM_VERSION"
                       [serving-cpu]="VLLM_VERSION=$VLLM_VERSION")
images=("$@")
[ ${#images[@]} -gt 0 ] || images=(operator trainer trainer-rocm serving serving-rocm)

DOCKER=${DOCKER:-$(command -v docker || command -v podman || true)}
if [ -z "$DOCKER" ]; then
  echo "build-images: neither docker nor podman is installed; nothing built" >&2
  exit 1
fi

for image in "${images[@]}"; do
  repository=${REPOSITORY[$image]:-}
  if [ -z "$repository" ]; then
    echo "build-images: unknown image '$image' (${!REPOSITORY[*]})" >&2
    exit 2
  fi
  ref="$REGISTRY/$repository:$TAG"
  args=()
  for arg in ${BUILD_ARGS[$image]}; do args+=(--build-arg "$arg"); done
  echo "== $ref (images/$image.Dockerfile)"
  "$DOCKER" build -f "images/$image.Dockerfile" "${args[@]}" -t "$ref" .
  if [ "${PUSH:-0}" = 1 ]; then "$DOCKER" push "$ref"; fi
done
