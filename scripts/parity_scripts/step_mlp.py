"""A loop of one's own tuned through autotune.step: an MLP classifier with dropout under DDP,
a seeded shuffle of each rank's rows, SGD with momentum and a warm-up, clipping, bf16
autocast with --bf16; mbs, grad_accum and ddp_bucket_mb from $AUTOTUNE_CONFIG. `--broken`
ties its training to the micro-batch (see data.py)."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from data import add_arguments, features, learning_rate, sampler_seed
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from autotune import step as autotune_step

YOURS = {"mbs": 4, "grad_accum": 2, "ddp_bucket_mb": 25}


def main() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args()
    knobs = dict(YOURS)
    if "AUTOTUNE_CONFIG" in os.environ:
        with open(os.environ["AUTOTUNE_CONFIG"]) as f:
            knobs.update(json.load(f))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mbs = knobs["mbs"]
    own = YOURS["grad_accum"]  # its own accumulation, whatever the trial's
    accumulation = own if args.broken == "accumulation" else knobs["grad_accum"]
    torch.manual_seed(0)
    layers = nn.Sequential(
        nn.Linear(64, 256), nn.GELU(), nn.Dropout(args.dropout),
        nn.Linear(256, 256), nn.GELU(), nn.Dropout(args.dropout), nn.Linear(256, 16),
    )  # fmt: skip
    model = DistributedDataParallel(layers, bucket_cap_mb=knobs["ddp_bucket_mb"])
    lr = learning_rate(args.broken, 0.05, mbs)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 5))
    x, y = features()
    x, y = x[rank::world], y[rank::world]
    order = torch.Generator().manual_seed(sampler_seed(args.broken, mbs))
    rows, at = torch.randperm(len(x), generator=order), 0
    for _ in range(args.steps):
        total = 0.0
        for _ in range(accumulation):
            if at + mbs > len(rows):
                rows, at = torch.randperm(len(x), generator=order), 0
            take = rows[:mbs] if args.broken == "fixed" else rows[at : at + mbs]
            at += mbs
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                logits = model(x[take])
            loss = nn.functional.cross_entropy(logits.float(), y[take]) / accumulation
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        autotune_step.done(loss=total)
    if rank == 0:
        print(f"trained {args.steps} steps with mbs {mbs}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
