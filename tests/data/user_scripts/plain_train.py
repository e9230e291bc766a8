"""A training loop of one's own (plain PyTorch DDP), tuned through autotune.step: it reads
the trial's knobs from $AUTOTUNE_CONFIG and calls autotune.step.done() after each step."""

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
    args = parser.parse_args()
    knobs = DEFAULTS
    if "AUTOTUNE_CONFIG" in os.environ:
        with open(os.environ["AUTOTUNE_CONFIG"]) as f:
            knobs = json.load(f)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    ddp = DistributedDataParallel(model, bucket_cap_mb=knobs["ddp_bucket_mb"])
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    for _ in range(args.steps):
        for _ in range(knobs["grad_accum"]):
            inputs = torch.randn(knobs["mbs"] * 16, 256)
            loss = (ddp(inputs) - inputs).pow(2).mean()
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        autotune_step.done()
    if dist.get_rank() == 0:
        print(f"trained {args.steps} steps with mbs {knobs['mbs']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
