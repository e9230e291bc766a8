#!/usr/bin/env bash
# autotune: best config of study 'golden', trial 0 (measured: 54,321 tokens/s).
# Runs it with autotune's worker on 2 node(s) x 8 device(s). For your own training script: megatron_args.txt holds the same config as Megatron-LM pretrain_gpt.py flags, megatron_core.py as megatron-core config objects.
set -euo pipefail
cd "$(dirname "$0")"
set -a; source ./nccl.env; set +a
export CUDA_DEVICE_MAX_CONNECTIONS=1
exec "${TORCHRUN:-torchrun}" --nnodes 2 --nproc-per-node 8 --node-rank "${NODE_RANK:?set NODE_RANK}" --rdzv-backend c10d --rdzv-endpoint "${RDZV_ENDPOINT:?set RDZV_ENDPOINT to host:port}" --max-restarts 0 -m autotune.rank autotune.engines.megatron.worker trial.json
