#!/usr/bin/env bash
# Creates .venv with everything autotune and its tests need. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
# A CPU build of torch: a bare "torch" requirement would pull a multi-GB CUDA build.
# On a GPU machine, install the torch build you want first; this pin is only for CPU hosts.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install --quiet "torch==2.13.0"
fi
.venv/bin/pip install --quiet -e '.[dev]'
