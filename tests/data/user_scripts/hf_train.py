"""A Hugging Face Trainer script with DeepSpeed (`--deepspeed FILE`), its arguments parsed by
HfArgumentParser as the Transformers examples do: a small randomly initialised GPT-2 (no
downloads) on synthetic tokens. --lr_per_sample X sets the learning rate to X times the
per-device batch, a script whose training follows the micro-batch (for loss parity's tests)."""

import os
import sys
from dataclasses import dataclass

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 4096, seq: int = 64, vocab: int = 512) -> None:
        generator = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, seq), generator=generator)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


@dataclass
class Script:
    lr_per_sample: float | None = None


def main() -> None:
    parser = HfArgumentParser((TrainingArguments, Script))  # type: ignore[arg-type]
    args, script = parser.parse_args_into_dataclasses()
    if script.lr_per_sample is not None:  # parsed again: the arguments fill "auto" as parsed
        lr = script.lr_per_sample * args.per_device_train_batch_size
        argv = [*sys.argv[1:], "--learning_rate", str(lr)]
        args, script = parser.parse_args_into_dataclasses(args=argv)
    config = GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=64, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens())
    trainer.train()
    if trainer.is_world_process_zero():
        print(f"trained {trainer.state.global_step} steps", flush=True)
    # DeepSpeed on gloo leaks a process group whose threads can abort the interpreter's exit
    # (see autotune/rank/harness.py); end without that teardown, as autotune's workers do.
    os._exit(0)


if __name__ == "__main__":
    main()
