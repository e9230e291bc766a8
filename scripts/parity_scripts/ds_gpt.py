"""A DeepSpeed training script as people write them: a small GPT, a seeded DistributedSampler,
dropout, gradient clipping and a warm-up/cosine schedule from the ds_config, DeepSpeed's own
argument parsing. `--broken` ties its training to the micro-batch (see data.py)."""

import argparse
import json
import os

import deepspeed
import torch
from data import SEQ, VOCAB, add_arguments, learning_rate, sampler_seed, tokens
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class GPT(nn.Module):
    def __init__(self, dropout: float, width: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.zeros(SEQ, width))
        block = nn.TransformerEncoderLayer(
            width, nhead=4, dim_feedforward=4 * width, dropout=dropout, batch_first=True
        )
        self.blocks = nn.TransformerEncoder(block, num_layers=layers)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = self.drop(self.embed(inputs) + self.position)
        return self.head(self.blocks(hidden, mask=self.mask, is_causal=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    parser.add_argument("--local_rank", type=int, default=-1)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    with open(args.deepspeed_config) as f:
        config = json.load(f)
    mbs = config["train_micro_batch_size_per_gpu"]
    lr = learning_rate(args.broken, config["optimizer"]["params"]["lr"], mbs)
    config["optimizer"]["params"]["lr"] = lr
    if args.broken == "accumulation":  # the script's own accumulation: the global batch follows
        config.pop("train_batch_size", None)
        config["gradient_accumulation_steps"] = 4
    if args.bf16:
        config["bf16"] = {"enabled": True}
    args.deepspeed_config = None
    torch.manual_seed(0)
    model = GPT(args.dropout)
    engine, _, _, _ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), config=config
    )
    data = tokens()
    dataset = TensorDataset(data[:, :-1], data[:, 1:])
    sampler: DistributedSampler[int] = DistributedSampler(
        dataset, seed=sampler_seed(args.broken, mbs), drop_last=True
    )
    loader = DataLoader(dataset, batch_size=mbs, sampler=sampler, drop_last=True)
    fixed = next(iter(loader)) if args.broken == "fixed" else None
    loss_fn = nn.CrossEntropyLoss()
    micro_steps = args.steps * engine.gradient_accumulation_steps()
    done, epoch = 0, 0
    while done < micro_steps:
        sampler.set_epoch(epoch)
        for inputs, labels in loader:
            if fixed is not None:
                inputs, labels = fixed
            logits = engine(inputs.to(engine.device))
            loss = loss_fn(logits.flatten(0, 1).float(), labels.to(engine.device).flatten())
            engine.backward(loss)
            engine.step()
            done += 1
            if done == micro_steps:
                break
        epoch += 1
    if engine.global_rank == 0:
        print(f"trained {args.steps} steps, last loss {loss.item():.3f}", flush=True)
    os._exit(0)  # DeepSpeed on gloo can abort the interpreter's exit (see ds_train.py)


if __name__ == "__main__":
    main()
