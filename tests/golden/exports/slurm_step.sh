#!/usr/bin/env bash
set -euo pipefail
unset NCCL_ALGO NCCL_PROTO
export OMP_NUM_THREADS=1
export NCCL_ALGO=Ring
id="$SLURM_JOB_ID${SLURM_STEP_ID:+.$SLURM_STEP_ID}"
nodes="${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}"
node_addr() { scontrol -o show node "$1" | sed -n 's/.* NodeAddr=\([^ ]*\).*/\1/p'; }
head=$(node_addr "$(scontrol show hostnames "$nodes" | head -n 1)")
addr=$(node_addr "$SLURMD_NODENAME")
is_host=$([ "${SLURM_NODEID:-0}" = 0 ] && echo 1 || echo 0)
port=$((20000 + (SLURM_JOB_ID * 7 + ${SLURM_STEP_ID:-0}) % 20000))
torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint "$head:$port" --rdzv-id "$id" --local-addr "$addr" --rdzv-conf is_host="$is_host" --max-restarts 0 -m autotune.rank autotune.engines.torch.worker trial.json &
pid=$!
if [ "${SLURM_NODEID:-0}" = 0 ]; then
  echo "$id" > slurm_id
  echo "$nodes" > slurm_nodes
  while kill -0 "$pid" 2>/dev/null; do
    age=$(( $(date +%s) - $(stat -c %Y tuner_heartbeat 2>/dev/null || echo 0) ))
    if [ "$age" -gt 30 ]; then scancel "$id"; fi
    sleep 2
  done
fi
wait "$pid"
