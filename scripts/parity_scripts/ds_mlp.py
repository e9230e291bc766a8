"""A DeepSpeed script that builds its own optimizer and schedule: an MLP classifier with
dropout, torch's AdamW and a linear warm-up then cosine LambdaLR handed to
deepspeed.initialize, a seeded shuffling DataLoader, clipping from the ds_config.
`--broken` ties its training to the micro-batch (see data.py)."""

import argparse
import json
import math
import os

import deepspeed
import torch
from data import add_arguments, features, learning_rate, sampler_seed
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    parser.add_argument("--local_rank", type=int, default=-1)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    with open(args.deepspeed_config) as f:
        config = json.load(f)
    mbs = config["train_micro_batch_size_per_gpu"]
    if args.broken == "accumulation":  # its own accumulation, the ds_config's: 32 / (2 x 2)
        config.pop("train_batch_size", None)
        config["gradient_accumulation_steps"] = 8
    if args.bf16:
        config["bf16"] = {"enabled": True}
    args.deepspeed_config = None
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 256), nn.GELU(), nn.Dropout(args.dropout),
        nn.Linear(256, 256), nn.GELU(), nn.Dropout(args.dropout), nn.Linear(256, 16),
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate(args.broken, 3e-3, mbs))

    def schedule(step: int) -> float:
        if step < 5:
            return (step + 1) / 5
        return 0.5 * (1 + math.cos(math.pi * min(1.0, step / args.steps)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    engine, _, _, _ = deepspeed.initialize(
        args=args, model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config
    )
    x, y = features()
    dataset = TensorDataset(x, y)
    # the script shuffles itself, in an order its seed draws:
    sampler: DistributedSampler[int] = DistributedSampler(dataset, shuffle=False)
    order = torch.Generator().manual_seed(sampler_seed(args.broken, mbs))
    loss_fn = nn.CrossEntropyLoss()
    micro_steps, done = args.steps * engine.gradient_accumulation_steps(), 0
    fixed = None
    while done < micro_steps:
        loader = DataLoader(  # a seeded shuffle of this rank's share, as many scripts do
            torch.utils.data.Subset(dataset, list(sampler)), batch_size=mbs, shuffle=True,
            generator=order, drop_last=True,
        )  # fmt: skip
        for inputs, labels in loader:
            if args.broken == "fixed":
                fixed = fixed or (inputs, labels)
                inputs, labels = fixed
            dtype = torch.bfloat16 if args.bf16 else torch.float32
            logits = engine(inputs.to(engine.device, dtype)).float()
            loss = loss_fn(logits, labels.to(engine.device))
            engine.backward(loss)
            engine.step()
            done += 1
            if done == micro_steps:
                break
    if engine.global_rank == 0:
        print(f"trained {args.steps} steps, last loss {loss.item():.3f}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
