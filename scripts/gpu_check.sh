#!/usr/bin/env bash
# The GPU check: on one CUDA machine, in under five minutes, a short real study per engine
# (megatron, deepspeed, torch) on one GPU with NCCL, then predicted against measured memory
# (torch.cuda.max_memory_allocated) and step time for every trial, in results/gpu/.
#
#   ./scripts/setup.sh && ./scripts/gpu_check.sh
#
# Studies are grid-ordered (no model guidance) so that each engine's first configs run, and
# each is cut off after GPU_CHECK_STUDY_S seconds (default 80) whatever it has finished.
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
for engine in megatron deepspeed torch; do
  timeout --signal=INT "$STUDY_S" "$PY" -m autotune run --engine "$engine" \
    --model scripts/gpu_check_model.yaml --cluster local:1 --trials 4 --sampler grid \
    --no-confirm --no-early-stop --measured-steps 5 --timeout-per-trial 60s \
    --results "$OUT/studies" --study "gpu-$engine" > "$OUT/$engine.log" 2>&1
  echo "$engine: exit $? (log in $OUT/$engine.log)"
done
"$PY" scripts/gpu_compare.py "$OUT/studies" > "$OUT/predicted_vs_measured.md"
cat "$OUT/predicted_vs_measured.md"
