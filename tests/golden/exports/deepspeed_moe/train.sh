#!/usr/bin/env bash
# autotune: best config of study 'golden', trial 0 (measured: 12,345 tokens/s).
# Runs it with autotune's worker on 2 node(s) x 8 device(s). For your own training script: pass ds_config.json to deepspeed.initialize(config=...) in your script and launch it with the same torchrun line; build its layers as measured: deepspeed.moe.layer.MoE(..., num_experts=8, ep_size=8, k=2, drop_tokens=False, top2_2nd_expert_sampling=False).
set -euo pipefail
cd "$(dirname "$0")"
set -a; source ./nccl.env; set +a
exec "${TORCHRUN:-torchrun}" --nnodes 2 --nproc-per-node 8 --node-rank "${NODE_RANK:?set NODE_RANK}" --rdzv-backend c10d --rdzv-endpoint "${RDZV_ENDPOINT:?set RDZV_ENDPOINT to host:port}" --max-restarts 0 -m autotune.rank autotune.engines.deepspeed.worker trial.json
