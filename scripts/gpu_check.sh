#!/usr/bin/env bash
# The GPU check: on one CUDA machine, in about five minutes,
#   1. `autotune commbench` on NCCL (every collective, 1 KiB to 256 MiB, with the
#      NCCL_ALGO x NCCL_PROTO sweep; one GPU exercises the NCCL path, not a link);
#   2. a short real study per engine (megatron, deepspeed, torch) on one GPU with NCCL;
#   3. predicted against measured memory (torch.cuda.max_memory_allocated) and step time for
#      every trial, in results/gpu/.
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
"$PY" scripts/gpu_compare.py "$OUT/studies" > "$OUT/predicted_vs_measured.md"
cat "$OUT/predicted_vs_measured.md"
