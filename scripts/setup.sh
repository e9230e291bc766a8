#!/usr/bin/env bash
# Development setup of this repository: creates .venv with autotune (editable), every
# framework extra and the tools its tests and docs use. With --services it also installs,
# as root, the Debian packages the integration tests use (PostgreSQL; SLURM with munge,
# slurmdbd and MariaDB; Chromium for the browser tests); without it nothing is installed
# outside .venv. Users install the package instead: docs/install.md. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
services=0
for arg in "$@"; do
  case "$arg" in
    --services) services=1 ;;
    *) echo "setup.sh: unknown option $arg (only --services)" >&2; exit 2 ;;
  esac
done
if [ "$services" = 1 ]; then
  packages=(postgresql slurm-wlm slurmdbd munge mariadb-server chromium)
  missing=()
  for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      echo "setup.sh: ${missing[*]} missing and this is not root; tests that need them will skip" >&2
    fi
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
# torchtitan's config parser checks the commands trials give it; the package alone (its
# requirements are for training, which this CPU cannot do: its kernels need triton).
.venv/bin/pip install --quiet --no-deps "torchtitan==0.2.2"
# DeepSpeed compiles its CPU ops on first use. Build them now, once, into this install's own
# folder (.venv/torch_extensions, where every trial's ranks look: autotune/rank/build_lock.py),
# rather than inside the first trials (where a trial killed mid-build would leave a lock) or
# into the folder every install of this user shares.
if .venv/bin/python -c "import sys, torch; sys.exit(1 if torch.cuda.is_available() else 0)"; then
  extensions="$(.venv/bin/python -c "
import os
from autotune.rank.build_lock import settle, use_install_folder
use_install_folder()
settle()  # a lock an interrupted setup left
print(os.environ.get('TORCH_EXTENSIONS_DIR', ''))")"
  if [ -n "$extensions" ]; then export TORCH_EXTENSIONS_DIR="$extensions"; fi
  # With the venv's ninja, as trials use (the local launcher puts the venv's bin first on
  # PATH): ninja versions hash build commands differently and would rebuild each other's.
  PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=cpu .venv/bin/python -c "
from deepspeed.ops.op_builder.cpu import CPUAdamBuilder, FusedAdamBuilder, ShareMemCommBuilder
ShareMemCommBuilder().load(verbose=False)
FusedAdamBuilder().load(verbose=False)
CPUAdamBuilder().load(verbose=False)  # the offload_optimizer knob's DeepSpeedCPUAdam" >/dev/null
fi
