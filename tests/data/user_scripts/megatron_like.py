# ruff: noqa: UP032 -- the log lines are built as Megatron-LM builds them
"""Stands in for Megatron-LM's pretrain_gpt.py on CPU, where megatron-core's schedules and
attention cannot run (they need CUDA): it takes Megatron-LM's flags, trains a small model on
gloo for --train-iters iterations, and prints what Megatron-LM prints, in its exact format
and from the ranks that print it (`training_log` by the last rank, `report_memory` by each
rank of data-parallel rank 0; megatron/training/training.py and utils.py at core_v0.14.0).
It writes the flags it was given to argv-rank<N>.json for the test to read."""

import argparse
import json
import resource
import sys
import time
from datetime import datetime

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for flag in ("--train-iters", "--log-interval", "--micro-batch-size", "--global-batch-size"):
        parser.add_argument(flag, type=int, required=True)
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
        parser.add_argument(flag, type=int, default=1)
    args, _ = parser.parse_known_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    with open(f"argv-rank{rank}.json", "w") as f:
        json.dump(sys.argv[1:], f)
    dp = world // (args.tensor_model_parallel_size * args.pipeline_model_parallel_size)
    accumulation = args.global_batch_size // (args.micro_batch_size * dp)
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    report_memory_flag = True
    for iteration in range(1, args.train_iters + 1):
        dist.barrier()  # Megatron's interval timer starts and stops with a barrier
        start = time.perf_counter()
        for _ in range(accumulation):
            model(torch.randn(args.micro_batch_size * 16, 256)).square().mean().backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
        optimizer.step()
        optimizer.zero_grad()
        dist.barrier()
        elapsed_time_per_iteration = time.perf_counter() - start
        if iteration % args.log_interval:
            continue
        log_string = f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}]"
        log_string += " iteration {:8d}/{:8d} |".format(iteration, args.train_iters)
        log_string += " consumed samples: {:12d} |".format(iteration * args.global_batch_size)
        log_string += " elapsed time per iteration (ms): {:.1f} |".format(
            elapsed_time_per_iteration * 1000.0
        )
        log_string += f" learning rate: {1e-4:.6E} |"
        log_string += f" global batch size: {args.global_batch_size:5d} |"
        log_string += " number of skipped iterations: {:3d} |".format(0)
        log_string += " number of nan iterations: {:3d} |".format(0)
        if rank == world - 1:
            print(log_string, flush=True)
        if report_memory_flag:
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            string = f"(after {iteration} iterations)" + " memory (MB)"
            string += " | allocated: {}".format(peak_mb / 2)
            string += " | max allocated: {}".format(peak_mb)
            string += " | reserved: {}".format(peak_mb)
            string += " | max reserved: {}".format(peak_mb)
            if rank % dp == 0:  # data-parallel rank 0
                print(f"[Rank {rank}] {string}", flush=True)
            report_memory_flag = False
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
