"""A user's DeepSpeed training script, as people write them: DeepSpeed's own argument
parsing, a model, a data loader and the usual loop. autotune tunes it without edits.

--hardcoded-config makes it ignore the config file it is given (for the config_ignored test);
--lr-per-sample X sets the learning rate (the optimizer's and the schedule's peak) to X times
the micro-batch, a script whose training follows the micro-batch (for loss parity's tests);
--shuffle-per-mbs seeds the data order with the micro-batch (its shuffle's generator), and
--gas-follows-mbs N keeps the accumulation at N whatever the config says, so the global batch
follows the micro-batch (DeepSpeed's own train_batch_size then differs from the trial's:
autotune fails such a trial as config_ignored).
"""

import argparse
import json
import os

import deepspeed
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 512, width: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        block = nn.TransformerEncoderLayer(
            width, nhead=4, dim_feedforward=4 * width, batch_first=True
        )
        self.blocks = nn.TransformerEncoder(block, num_layers=layers)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def own_config(args: argparse.Namespace) -> dict | None:
    """The config the script's own flags make, which DeepSpeed then takes instead of the file
    it was given; None where it takes the file."""
    if args.hardcoded_config:
        args.deepspeed_config = None
        return {  # a micro-batch no trial of the test's space asks for
            "train_batch_size": 32,
            "train_micro_batch_size_per_gpu": 16,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        }
    if args.lr_per_sample is None and args.gas_follows_mbs is None:
        return None
    with open(args.deepspeed_config) as f:
        config = json.load(f)
    args.deepspeed_config = None
    if args.lr_per_sample is not None:
        lr = args.lr_per_sample * config["train_micro_batch_size_per_gpu"]
        config["optimizer"]["params"]["lr"] = lr
        config["scheduler"]["params"]["warmup_max_lr"] = lr
    if args.gas_follows_mbs is not None:
        config.pop("train_batch_size", None)
        config["gradient_accumulation_steps"] = args.gas_follows_mbs
    return config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps")
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--hardcoded-config", action="store_true")
    parser.add_argument("--lr-per-sample", type=float, default=None)
    parser.add_argument("--shuffle-per-mbs", action="store_true")
    parser.add_argument("--gas-follows-mbs", type=int, default=None)
    parser.add_argument("--local_rank", type=int, default=-1)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    config = own_config(args)
    model = TinyLM(args.vocab, args.width, args.layers)
    engine, _, _, _ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), config=config
    )
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (1024, args.seq + 1), generator=generator)
    mbs = engine.train_micro_batch_size_per_gpu()
    order = torch.Generator().manual_seed(mbs) if args.shuffle_per_mbs else None
    data = DataLoader(
        TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=mbs, shuffle=True, generator=order
    )
    loss_fn = nn.CrossEntropyLoss()
    micro_steps = args.steps * engine.gradient_accumulation_steps()
    done = 0
    while done < micro_steps:
        for inputs, labels in data:
            logits = engine(inputs.to(engine.device))
            loss = loss_fn(logits.flatten(0, 1), labels.to(engine.device).flatten())
            engine.backward(loss)
            engine.step()
            done += 1
            if done == micro_steps:
                break
    if engine.global_rank == 0:
        print(f"trained {args.steps} steps, last loss {loss.item():.3f}", flush=True)
    # DeepSpeed on gloo leaks a process group whose threads can abort the interpreter's exit
    # (see autotune/rank/harness.py); end without that teardown, as autotune's workers do.
    os._exit(0)


if __name__ == "__main__":
    main()
