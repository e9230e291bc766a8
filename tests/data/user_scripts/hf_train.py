"""A Hugging Face Trainer script with DeepSpeed (`--deepspeed FILE`), its arguments parsed by
HfArgumentParser as the Transformers examples do: a small randomly initialised GPT-2 (no
downloads) on synthetic tokens. --lr_per_sample X sets the learning rate to X times the
per-device batch, a script whose training follows the micro-batch (for loss parity's tests);
--shuffle_per_mbs orders the data by a permutation seeded with the per-device batch (with
--mixed_data, a quarter of the sequences drawn from 64 of the 512 tokens, easier than the
rest, as real data mix easy and hard samples: on uniform random tokens no order shows in the
loss), and
--gas_follows_mbs N keeps the accumulation at N (autotune sets both batch flags to keep the
global batch; the script sets its own, and its DeepSpeed config's batch sizes back to "auto"
for the Trainer to fill), so the global batch follows the per-device batch."""

import json
import os
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
    def __init__(
        self, n: int = 4096, seq: int = 64, vocab: int = 512, order: int = 0, mixed: bool = False
    ) -> None:
        generator = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, seq), generator=generator)
        if mixed:  # every fourth sequence from 64 tokens only
            self.data[::4] %= 64
        if order:  # the data order seeded with `order`
            self.data = self.data[torch.randperm(n, generator=generator.manual_seed(order))]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


def auto_batch(config: str, folder: str) -> str:
    """A copy of the DeepSpeed config file `config` whose batch sizes the Trainer fills."""
    with open(config) as f:
        settings = json.load(f)
    batch = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    settings.update(dict.fromkeys(batch, "auto"))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"ds_auto_{os.environ.get('RANK', '0')}.json")
    with open(path, "w") as f:
        json.dump(settings, f)
    return path


@dataclass
class Script:
    lr_per_sample: float | None = None
    shuffle_per_mbs: bool = False
    mixed_data: bool = False
    gas_follows_mbs: int | None = None


def value(argv: list[str], name: str) -> str | None:
    """The last value a flag of the Trainer's is given, in either spelling (`--a_b V`,
    `--a-b=V`)."""
    found = None
    for i, argument in enumerate(argv):
        flag, _, inline = argument.partition("=")
        if flag.lstrip("-").replace("-", "_") == name and flag.startswith("--"):
            found = inline or (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def script_flags(script: Script, argv: list[str]) -> list[str]:
    """The Trainer's arguments with what the script's own flags set appended (the last
    wins): parsed once, as they fill "auto" in the DeepSpeed config as they are parsed."""
    mbs = int(value(argv, "per_device_train_batch_size") or 8)
    if script.lr_per_sample is not None:
        argv = [*argv, "--learning_rate", str(script.lr_per_sample * mbs)]
    config, folder = value(argv, "deepspeed"), value(argv, "output_dir")
    if script.gas_follows_mbs is not None and config and folder:
        argv = [*argv, "--gradient_accumulation_steps", str(script.gas_follows_mbs)]
        argv = [*argv, "--deepspeed", auto_batch(config, folder)]
    return argv


def main() -> None:
    script, rest = HfArgumentParser(Script).parse_args_into_dataclasses(  # type: ignore[arg-type]
        return_remaining_strings=True
    )
    argv = script_flags(script, rest)  # before the Trainer's arguments: they are parsed once
    parser = HfArgumentParser(TrainingArguments)  # type: ignore[arg-type]
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    order = args.per_device_train_batch_size if script.shuffle_per_mbs else 0
    data = Tokens(order=order, mixed=script.mixed_data)
    config = GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=64, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data)
    trainer.train()
    if trainer.is_world_process_zero():
        print(f"trained {trainer.state.global_step} steps", flush=True)
    # DeepSpeed on gloo leaks a process group whose threads can abort the interpreter's exit
    # (see autotune/rank/harness.py); end without that teardown, as autotune's workers do.
    os._exit(0)


if __name__ == "__main__":
    main()
