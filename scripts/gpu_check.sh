#!/usr/bin/env bash
# The GPU check: on one CUDA machine, in about five minutes,
#   1. `autotune commbench` on NCCL (every collective, 1 KiB to 256 MiB, with the
#      NCCL_ALGO x NCCL_PROTO sweep; one GPU exercises the NCCL path, not a link);
#   2. a short real study per engine (megatron, deepspeed, torch) on one GPU with NCCL, and
#      one of a small mixture of experts with megatron (its MoE layers, grouped GEMMs);
#   3. predicted against measured memory (torch.cuda.max_memory_allocated) and step time for
#      every trial, in results/gpu/;
#   4. the user's own command, measured from the framework's own log lines: Megatron-LM's
#      pretrain_gpt.py from a checkout named by $MEGATRON_LM (mock data), and torchtitan's
#      debug model from a checkout named by $TORCHTITAN (its test tokenizer); each is skipped,
#      with a line saying so, when its checkout is not there (the pip packages lack the script
#      and the tokenizer, and the GPU host reaches no network).
#
#   ./scripts/setup.sh && ./scripts/gpu_check.sh
#
# Studies are grid-ordered (no model guidance) so that each engine's first configs run, and
# each is cut off after GPU_CHECK_STUDY_S seconds (default 80) whatever it has finished.
# DeepSpeed's fused Adam is compiled in the background while commbench and megatron run, so
# that its first trial does not spend its time limit in nvcc.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${GPU_CHECK_OUT:-results/gpu}
STUDY_S=${GPU_CHECK_STUDY_S:-80}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" || {
  echo "gpu_check: nvidia-smi failed: this script needs a CUDA machine" >&2
  exit 2
}
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', '.'.join(map(str, torch.cuda.nccl.version())))" >> "$OUT/gpu.csv"
"$PY" -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load()" \
  > "$OUT/deepspeed_ops.log" 2>&1 &
ops_build=$!
"$PY" -m autotune commbench --cluster local --sizes 1K:256M --results "$OUT" \
  > "$OUT/commbench.txt" 2>&1
echo "commbench: exit $? (table in $OUT/commbench.txt)"
for engine in megatron deepspeed torch; do
  [ "$engine" = deepspeed ] && wait "$ops_build"
  timeout --signal=INT "$STUDY_S" "$PY" -m autotune run --engine "$engine" \
    --model scripts/gpu_check_model.yaml --cluster local --trials 4 --sampler grid \
    --no-confirm --no-early-stop --measured-steps 5 --timeout-per-trial 60s \
    --results "$OUT/studies" --study "gpu-$engine" > "$OUT/$engine.log" 2>&1
  echo "$engine: exit $? (log in $OUT/$engine.log)"
done
timeout --signal=INT "$STUDY_S" "$PY" -m autotune run --engine megatron \
  --model scripts/gpu_check_moe.yaml --cluster local --trials 2 --sampler grid \
  --no-confirm --no-early-stop --measured-steps 5 --timeout-per-trial 60s \
  --results "$OUT/studies" --study gpu-megatron-moe > "$OUT/megatron-moe.log" 2>&1
echo "megatron-moe: exit $? (log in $OUT/megatron-moe.log)"
here=$PWD
job_study() {  # FRAMEWORK_DIR ENGINE STUDY -- COMMAND...: a 2-trial study of a user's command
  local dir=$1 engine=$2 study=$3
  shift 4
  (cd "$dir" && timeout --signal=INT "$STUDY_S" "$here/$PY" -m autotune run --engine "$engine" \
    --cluster local --trials 2 --sampler grid --no-confirm --no-early-stop \
    --timeout-per-trial 120s --results "$here/$OUT/studies" --study "$study" -- "$@") \
    > "$OUT/$study.log" 2>&1
  echo "$study: exit $? (log in $OUT/$study.log)"
}
if [ -f "${MEGATRON_LM:-}/pretrain_gpt.py" ]; then
  job_study "$MEGATRON_LM" megatron gpu-megatron-lm -- pretrain_gpt.py \
    --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 \
    --max-position-embeddings 512 --position-embedding-type rope --normalization RMSNorm \
    --swiglu --disable-bias-linear --micro-batch-size 2 --global-batch-size 16 --bf16 \
    --lr 1e-4 --train-iters 1000 --mock-data --tokenizer-type NullTokenizer \
    --vocab-size 32000 --split 99,1,0 --transformer-impl local
else
  echo "gpu-megatron-lm: skipped (set MEGATRON_LM to a Megatron-LM checkout)"
fi
if [ -f "${TORCHTITAN:-}/torchtitan/train.py" ]; then
  job_study "$TORCHTITAN" torch gpu-torchtitan -- -m torchtitan.train \
    --job.config_file torchtitan/models/llama3/train_configs/debug_model.toml
else
  echo "gpu-torchtitan: skipped (set TORCHTITAN to a torchtitan checkout at v0.2.2)"
fi
"$PY" scripts/gpu_compare.py "$OUT/studies" > "$OUT/predicted_vs_measured.md"
cat "$OUT/predicted_vs_measured.md"
