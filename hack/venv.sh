#!/usr/bin/env bash
# The project's virtualenv in .venv, with every part's extras and the dev tools. Each step prints its
# start with the elapsed seconds (hack/setup.sh's heartbeat shows the latest while pip works).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/progress.sh
step() { echo "venv: [$(elapsed_s)] $*"; }
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
step "upgrading pip"
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: an unpinned range would make pip fetch a multi-GB CUDA build.
step "installing ${TIDE_TORCH_SPEC:-torch==2.13.0}"
.venv/bin/python -m pip install -q "${TIDE_TORCH_SPEC:-torch==2.13.0}"
# Editable installs write build metadata into the checkout: one at a time (vllm-env.sh does the same).
step "installing the project with every extra"
flock /tmp/tide-editable-install.lock \
  .venv/bin/python -m pip install -q -e ".[operator,trainer,serving,localcluster,cli,dev]"
.venv/bin/python -c "import tide_operator, tide_trainer, tide_serving, tide_contracts, tide_localcluster, torch"
echo "venv ready: $(.venv/bin/python --version), torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
