#!/usr/bin/env bash
# Install everything the demo and the tests need on a fresh Debian 12 machine, reusing caches:
# Debian packages, the project's virtualenv (.venv), the Kubernetes binaries (built once from
# Debian's source package) and, with --vllm, the vLLM CPU environment. Independent steps run
# in parallel with the Go build, which is the long pole on a cold machine.
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_VLLM=0
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    *) echo "usage: hack/setup.sh [--vllm]" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' 2>/dev/null || {
  echo "error: Python >= 3.11 is required as \$PYTHON (found: $("$PYTHON" --version 2>&1))" >&2; exit 2; }

# --- Debian packages: runtime services, and the Go toolchain only when binaries must be built.
need=()
for pair in etcd:etcd-server prometheus:prometheus openssl:openssl; do
  command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

logdir=$(mktemp -d)
pids=()
names=()
start() {  # start NAME CMD...: run in the background, log to a file
  local name=$1; shift
  ( "$@" ) >"$logdir/$name.log" 2>&1 &
  pids+=($!); names+=("$name")
}

start kubernetes-build bash hack/build-kube.sh
start python-venv bash hack/venv.sh
if [ "$WITH_VLLM" -eq 1 ]; then
  if [ -f hack/vllm-env.sh ]; then start vllm-env bash hack/vllm-env.sh; fi
fi

failed=0
for i in "${!pids[@]}"; do
  t0=$SECONDS
  if wait "${pids[$i]}"; then
    echo "== ${names[$i]}: ok"
  else
    echo "== ${names[$i]}: FAILED; its log:" >&2
    tail -n 40 "$logdir/${names[$i]}.log" >&2
    failed=1
  fi
done
rm -rf "$logdir"
exit $failed
