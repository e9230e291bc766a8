"""Synthetic data and the broken ways a script can tie its training to the micro-batch, shared
by the parity benchmark's scripts (each script is copied beside this file).

The tokens mix easy sequences (every fourth drawn from 64 of the vocabulary's tokens) with
hard ones, as real data do, so that the order of the samples shows in the loss.
"""

from __future__ import annotations

import argparse

import torch

VOCAB, SEQ, SAMPLES = 512, 32, 4096
BROKEN = ("lr", "order", "fixed", "accumulation")
"""lr: the learning rate is set per sample (times the micro-batch); order: the shuffle is
seeded with the micro-batch; fixed: one batch of the micro-batch's size is reused every step;
accumulation: the script keeps its own accumulation, so the global batch follows the
micro-batch."""


def tokens() -> torch.Tensor:
    """SAMPLES sequences of SEQ + 1 tokens, the same in every run."""
    generator = torch.Generator().manual_seed(1234)
    data = torch.randint(0, VOCAB, (SAMPLES, SEQ + 1), generator=generator)
    data[::4] %= 64
    return data


def features() -> tuple[torch.Tensor, torch.Tensor]:
    """SAMPLES rows of 64 features and a class of 16, a noisy linear rule."""
    generator = torch.Generator().manual_seed(4321)
    x = torch.randn(SAMPLES, 64, generator=generator)
    w = torch.randn(64, 16, generator=generator)
    y = (x @ w + 0.5 * torch.randn(SAMPLES, 16, generator=generator)).argmax(dim=1)
    x[::4] *= 0.1  # a quarter of the rows nearly uninformative: harder
    return x, y


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--broken", choices=BROKEN, default=None)


def sampler_seed(broken: str | None, mbs: int) -> int:
    """The data order's seed: fixed, or the micro-batch (`order`)."""
    return mbs if broken == "order" else 0


def learning_rate(broken: str | None, lr: float, mbs: int) -> float:
    """The peak learning rate: as given, or per sample of a micro-batch of 4 (`lr`)."""
    return lr * mbs / 4 if broken == "lr" else lr
