#!/usr/bin/env bash
# Build the project's images where Docker (or Podman) exists:
#   hack/build-images.sh                 # operator, trainer and serving
#   hack/build-images.sh operator        # just one (operator | trainer | serving | serving-cpu)
#   hack/build-images.sh serving-cpu     # vLLM's CPU build + the plugin (kind e2e, no GPU)
# Environment: REGISTRY (default ghcr.io/tide-operator), TAG (default: pyproject's version),
#   DOCKER (default: docker, else podman), PUSH=1 to push after building.
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-$(command -v docker || command -v podman || true)}
if [ -z "$DOCKER" ]; then
  echo "build-images: neither docker nor podman is installed; nothing built" >&2
  exit 1
fi
REGISTRY=${REGISTRY:-ghcr.io/tide-operator}
TAG=${TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)}

declare -A REPOSITORY=([operator]=tide-operator [trainer]=tide-trainer [serving]=vllm-tide
                       [serving-cpu]=vllm-tide-cpu)
images=("$@")
[ ${#images[@]} -gt 0 ] || images=(operator trainer serving)

for image in "${images[@]}"; do
  repository=${REPOSITORY[$image]:-}
  if [ -z "$repository" ]; then
    echo "build-images: unknown image '$image' (operator, trainer, serving or serving-cpu)" >&2
    exit 2
  fi
  ref="$REGISTRY/$repository:$TAG"
  echo "== $ref (images/$image.Dockerfile)"
  "$DOCKER" build -f "images/$image.Dockerfile" -t "$ref" .
  if [ "${PUSH:-0}" = 1 ]; then "$DOCKER" push "$ref"; fi
done
