#!/usr/bin/env bash
# autotune: best config of study 'mine', trial 0 (measured: 54,321 tokens/s).
# Runs your own command with it on 2 node(s) x 8 device(s), from the folder it was tuned in.
set -euo pipefail
cd "$(dirname "$0")"
set -a; source ./nccl.env; set +a
export CUDA_DEVICE_MAX_CONNECTIONS=1
here="$(pwd)"
cd /work
exec "${TORCHRUN:-torchrun}" --nnodes 2 --nproc-per-node 8 --node-rank "${NODE_RANK:?set NODE_RANK}" --rdzv-backend c10d --rdzv-endpoint "${RDZV_ENDPOINT:?set RDZV_ENDPOINT to host:port}" --max-restarts 0 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --swiglu --seq-length 4096 --max-position-embeddings 4096 --bf16 --train-iters 500000 --lr-warmup-iters 2000 --lr 3e-4 --save /ckpt/llama --save-interval 1000 --load /ckpt/llama --log-interval 100 --eval-iters 10 --eval-interval 1000 --data-path /data/tokens_text_document --tokenizer-type NullTokenizer --vocab-size 128256 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 6553600 --micro-batch-size 1 --global-batch-size 256
