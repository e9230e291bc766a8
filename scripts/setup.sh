#!/usr/bin/env bash
# Creates .venv with everything autotune and its tests need, and the Debian packages the
# integration tests use (PostgreSQL). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
  else
    echo "setup.sh: PostgreSQL is missing and this is not root; multi-worker tests will skip" >&2
  fi
fi
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
# A CPU build of torch: a bare "torch" requirement would pull a multi-GB CUDA build.
# On a GPU machine, install the torch build you want first; this pin is only for CPU hosts.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install --quiet "torch==2.13.0"
fi
.venv/bin/pip install --quiet -e '.[dev]'
