#!/usr/bin/env bash
# The main job: a local demo on the embedded control plane. Installs what it needs, starts the
# plane with fake GPU pools, runs the demo, and leaves nothing running (Ctrl-C included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
exec .venv/bin/python -m tide_e2e.demo "$@"
