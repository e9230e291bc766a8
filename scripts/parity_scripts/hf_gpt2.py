"""A Hugging Face Trainer script with DeepSpeed (`--deepspeed FILE`), its arguments parsed by
HfArgumentParser as the Transformers examples do: a small randomly initialised GPT-2 with its
dropouts set by --dropout, a warm-up/cosine schedule and clipping from the Trainer's flags,
`--bf16` as the Trainer takes it. `--broken` ties its training to the per-device batch: the
learning rate (per sample), the data order (seeded with it), one batch reused (the first
per-device batch, every step), or its own accumulation (the global batch follows)."""

import json
import os
from dataclasses import dataclass

import torch
from data import learning_rate, sampler_seed, tokens
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, order: int, fixed: int) -> None:
        data = tokens()[:, :-1]
        if order:
            data = data[torch.randperm(len(data), generator=torch.Generator().manual_seed(order))]
        if fixed:  # the first `fixed` sequences over and over
            data = data[:fixed].repeat(len(data) // fixed, 1)
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


@dataclass
class Script:
    dropout: float = 0.1
    broken: str | None = None


def value(argv: list[str], name: str) -> str | None:
    """The last value of a Trainer flag, in either spelling (`--a_b V`, `--a-b=V`)."""
    found = None
    for i, argument in enumerate(argv):
        flag, _, inline = argument.partition("=")
        if flag.startswith("--") and flag.lstrip("-").replace("-", "_") == name:
            found = inline or (argv[i + 1] if i + 1 < len(argv) else None)
    return found


def own_accumulation(argv: list[str]) -> list[str]:
    """The script's own accumulation of 4, its DeepSpeed file's batch sizes back to "auto"."""
    config, folder = value(argv, "deepspeed"), value(argv, "output_dir")
    assert config and folder
    with open(config) as f:
        settings = json.load(f)
    batch = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    settings.update(dict.fromkeys(batch, "auto"))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"ds_auto_{os.environ.get('RANK', '0')}.json")
    with open(path, "w") as f:
        json.dump(settings, f)
    return [*argv, "--gradient_accumulation_steps", "4", "--deepspeed", path]


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
    fixed = mbs if script.broken == "fixed" else 0
    data = Tokens(order=sampler_seed(script.broken, mbs), fixed=fixed)
    config = GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=32, bos_token_id=0,
        eos_token_id=0, resid_pdrop=script.dropout, embd_pdrop=script.dropout,
        attn_pdrop=script.dropout,
    )  # fmt: skip
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data)
    trainer.train()
    if trainer.is_world_process_zero():
        print(f"trained {trainer.state.global_step} steps", flush=True)
    os._exit(0)  # DeepSpeed on gloo can abort the interpreter's exit


if __name__ == "__main__":
    main()
