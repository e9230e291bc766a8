"""A Hugging Face Trainer script that trains a model of its own: an MLP classifier with
dropout whose forward returns the loss as the Trainer expects, the Trainer's warm-up/cosine
schedule and clipping, `--deepspeed FILE`. `--broken` as in hf_gpt2.py."""

import os
from dataclasses import dataclass

import torch
from data import features, learning_rate, sampler_seed
from hf_gpt2 import own_accumulation, value
from torch import nn
from transformers import HfArgumentParser, Trainer, TrainingArguments


class Classifier(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(64, 256), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(256, 256), nn.GELU(), nn.Dropout(dropout), nn.Linear(256, 16),
        )  # fmt: skip

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.layers(x)
        return {"loss": nn.functional.cross_entropy(logits.float(), labels), "logits": logits}


class Rows(torch.utils.data.Dataset):
    def __init__(self, order: int, fixed: int) -> None:
        x, y = features()
        if order:
            perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(order))
            x, y = x[perm], y[perm]
        if fixed:
            x, y = x[:fixed].repeat(len(x) // fixed, 1), y[:fixed].repeat(len(y) // fixed)
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


@dataclass
class Script:
    dropout: float = 0.1
    broken: str | None = None


def main() -> None:
    script, rest = HfArgumentParser(Script).parse_args_into_dataclasses(  # type: ignore[arg-type]
        return_remaining_strings=True
    )
    mbs = int(value(rest, "per_device_train_batch_size") or 8)
    lr = float(value(rest, "learning_rate") or 5e-5)
    argv = [*rest, "--learning_rate", str(learning_rate(script.broken, lr, mbs))]
    if script.broken == "accumulation":
        argv = own_accumulation(argv)
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(args=argv)  # type: ignore[arg-type]
    data = Rows(sampler_seed(script.broken, mbs), mbs if script.broken == "fixed" else 0)
    torch.manual_seed(0)
    trainer = Trainer(model=Classifier(script.dropout), args=args, train_dataset=data)
    trainer.train()
    if trainer.is_world_process_zero():
        print(f"trained {trainer.state.global_step} steps", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
