#!/usr/bin/env bash
# The main job: a local demo on the embedded control plane. Installs what it needs (the vLLM CPU
# environment too, unless --fast), starts the plane with fake GPU pools, runs the demo, and leaves
# nothing running (Ctrl-C included). Default: the whole loop with real vLLM and the real trainer.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ " $* " == *" --fast "* ]]; then
  bash hack/setup.sh
else
  bash hack/setup.sh --vllm
fi
exec .venv/bin/python -m tide_e2e.demo "$@"
