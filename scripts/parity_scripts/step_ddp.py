"""A training loop of one's own tuned through autotune.step: a small GPT under DDP, a seeded
DistributedSampler, dropout, AdamW with a warm-up/cosine LambdaLR, clipping, bf16 autocast
with --bf16; the knobs it applies (mbs, grad_accum, ddp_bucket_mb) read from
$AUTOTUNE_CONFIG, its own values otherwise. `--broken` ties its training to the micro-batch
(see data.py)."""

import argparse
import json
import math
import os

import torch
import torch.distributed as dist
from data import add_arguments, learning_rate, sampler_seed, tokens
from ds_gpt import GPT
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from autotune import step as autotune_step

YOURS = {"mbs": 2, "grad_accum": 4, "ddp_bucket_mb": 25}
"""The config this loop runs without autotune: 2 x 4 x 2 ranks = 16 sequences a step."""


def main() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args()
    knobs = dict(YOURS)
    if "AUTOTUNE_CONFIG" in os.environ:
        with open(os.environ["AUTOTUNE_CONFIG"]) as f:
            knobs.update(json.load(f))
    dist.init_process_group("gloo")
    mbs = knobs["mbs"]
    own = YOURS["grad_accum"]  # its own accumulation, whatever the trial's
    accumulation = own if args.broken == "accumulation" else knobs["grad_accum"]
    torch.manual_seed(0)
    model = DistributedDataParallel(GPT(args.dropout), bucket_cap_mb=knobs["ddp_bucket_mb"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate(args.broken, 2e-3, mbs))

    def schedule(step: int) -> float:
        if step < 8:
            return (step + 1) / 8
        return 0.5 * (1 + math.cos(math.pi * min(1.0, step / args.steps)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    data = tokens()
    dataset = TensorDataset(data[:, :-1], data[:, 1:])
    sampler: DistributedSampler[int] = DistributedSampler(
        dataset, seed=sampler_seed(args.broken, mbs), drop_last=True
    )
    loader = DataLoader(dataset, batch_size=mbs, sampler=sampler, drop_last=True)
    batches, epoch = iter(loader), 0
    fixed = next(iter(loader)) if args.broken == "fixed" else None
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(args.steps):
        total = 0.0
        for _ in range(accumulation):
            try:
                inputs, labels = next(batches)
            except StopIteration:
                epoch += 1
                sampler.set_epoch(epoch)
                batches = iter(loader)
                inputs, labels = next(batches)
            if fixed is not None:
                inputs, labels = fixed
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                logits = model(inputs)
            loss = loss_fn(logits.flatten(0, 1).float(), labels.flatten()) / accumulation
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        autotune_step.done(loss=total)
    if dist.get_rank() == 0:
        print(f"trained {args.steps} steps with mbs {mbs}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
