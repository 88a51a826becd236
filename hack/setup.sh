#!/usr/bin/env bash
# Install everything the demo and the tests need on a fresh Debian 12 machine, reusing caches:
# Debian packages, the project's virtualenv (.venv), the Kubernetes binaries (built once from
# Debian's source package) and, with --vllm, the vLLM CPU environment. Independent steps run
# in parallel with the Go build, which is the long pole on a cold machine. Each step's output goes to
# its log (shown when it fails); the terminal gets a line per step with its time and, while steps run,
# a heartbeat with each one's last log line every TIDE_HEARTBEAT_SECONDS (hack/lib/progress.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/progress.sh

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
logdir=$(mktemp -d)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need[*]}"
  [ -z "$SUDO" ] || $SUDO -v  # a password prompt, if any, before the output goes to a log
  t0=$SECONDS
  run_with_heartbeat debian-packages "$logdir/debian-packages.log" bash -c \
    '$0 apt-get update -qq && DEBIAN_FRONTEND=noninteractive $0 apt-get install -y -qq "$@"' "$SUDO" "${need[@]}" || {
    rc=$?; echo "== debian-packages: FAILED; its log:" >&2; tail -n 40 "$logdir/debian-packages.log" >&2; exit $rc; }
  echo "== debian-packages: ok ($((SECONDS - t0))s)"
fi

pids=()
names=()
start() {  # start NAME CMD...: run in the background with a heartbeat, log to a file, record its seconds
  local name=$1; shift
  echo "== $name: started"
  ( t0=$SECONDS; rc=0
    run_with_heartbeat "$name" "$logdir/$name.log" "$@" || rc=$?
    echo "$((SECONDS - t0))" >"$logdir/$name.seconds"
    exit $rc ) &
  pids+=($!); names+=("$name")
}

start kubernetes-build bash hack/build-kube.sh
start python-venv bash hack/venv.sh
if [ "$WITH_VLLM" -eq 1 ]; then
  if [ -f hack/vllm-env.sh ]; then start vllm-env bash hack/vllm-env.sh; fi
fi

failed=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    echo "== ${names[$i]}: ok ($(cat "$logdir/${names[$i]}.seconds" 2>/dev/null || echo "?")s)"
  else
    echo "== ${names[$i]}: FAILED after $(cat "$logdir/${names[$i]}.seconds" 2>/dev/null || echo "?")s; its log:" >&2
    tail -n 40 "$logdir/${names[$i]}.log" >&2
    failed=1
  fi
done
rm -rf "$logdir"
exit $failed
