"""A training loop of one's own (plain PyTorch DDP), tuned through autotune.step: it reads
the trial's knobs from $AUTOTUNE_CONFIG and calls autotune.step.done(loss=...) after each step
with the step's loss. --lr-per-sample X sets the learning rate to X times the micro-batch, a
script whose training follows the micro-batch (for loss parity's tests); --shuffle-per-mbs
draws its samples from a fixed pool in an order seeded with the micro-batch, and
--gas-follows-mbs N accumulates N micro-batches whatever the config says, so the global batch
follows the micro-batch."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from autotune import step as autotune_step

DEFAULTS = {"mbs": 4, "grad_accum": 2, "ddp_bucket_mb": 25}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr-per-sample", type=float, default=None)
    parser.add_argument("--shuffle-per-mbs", action="store_true")
    parser.add_argument("--gas-follows-mbs", type=int, default=None)
    args = parser.parse_args()
    knobs = DEFAULTS
    if "AUTOTUNE_CONFIG" in os.environ:
        with open(os.environ["AUTOTUNE_CONFIG"]) as f:
            knobs = json.load(f)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    ddp = DistributedDataParallel(model, bucket_cap_mb=knobs["ddp_bucket_mb"])
    lr = 1e-3 if args.lr_per_sample is None else args.lr_per_sample * knobs["mbs"]
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=lr)
    accumulation = args.gas_follows_mbs or knobs["grad_accum"]
    rows = knobs["mbs"] * 16
    pool = torch.randn(4096, 256, generator=torch.Generator().manual_seed(0))
    order = torch.randperm(4096, generator=torch.Generator().manual_seed(knobs["mbs"]))
    drawn = 0
    for _ in range(args.steps):
        total = 0.0
        for _ in range(accumulation):
            if args.shuffle_per_mbs:  # the pool's rows, in an order seeded with the micro-batch
                inputs = pool[order[(drawn + torch.arange(rows)) % 4096]]
                drawn += rows
            else:
                inputs = torch.randn(rows, 256)
            loss = (ddp(inputs) - inputs).pow(2).mean() / accumulation
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        autotune_step.done(loss=total)
    if dist.get_rank() == 0:
        print(f"trained {args.steps} steps with mbs {knobs['mbs']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
