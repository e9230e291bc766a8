#!/usr/bin/env bash
# autotune: best config of study 'mine', trial 0 (measured: 54,321 tokens/s).
# Runs your own command with it on 1 node(s) x 8 device(s), from the folder it was tuned in.
set -euo pipefail
cd "$(dirname "$0")"
set -a; source ./nccl.env; set +a
here="$(pwd)"
cd /work/titan
exec "${TORCHRUN:-torchrun}" --nnodes 1 --nproc-per-node 8 --standalone --max-restarts 0 -m torchtitan.train --job.config_file llama3_8b.toml --parallelism.tensor_parallel_degree 2 --parallelism.pipeline_parallel_degree 1 --parallelism.data_parallel_replicate_degree 1 --parallelism.data_parallel_shard_degree 4 --parallelism.fsdp_reshard_after_forward never --training.local_batch_size 2 --training.global_batch_size 64 --activation_checkpoint.mode full
