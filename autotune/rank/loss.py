"""The loss of each optimizer step, as a trial records it for loss parity
(`study/verdict/parity.py`).

A framework's hook hands over each micro-batch's loss as the engine's backward receives it,
or the whole step's loss where the framework or the user's call to `autotune.step.done`
knows it; the step's loss is their average over the step's micro-batches (their sum where
the caller already divided them by the accumulation, as the Trainer does), and the trial's
curve is that, averaged over the ranks. Before the user's command runs, every rank is seeded
alike, so a script that does not seed itself starts from the same model in every trial.

The second run of the user's config draws otherwise from the end of its first optimizer step
(`reseed_after_first_step`); a trial given the user's curve and floor (`ParityPlan`) averages
each step's loss over the ranks as the step ends and is told when it leaves them (`Watch`).
"""

from __future__ import annotations

import math
import random

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

from autotune.trial.spec import ParityPlan

SEED = 0
"""The seed every trial's ranks start from (the script's own seeding replaces it)."""


def seed_everything() -> None:
    """The same random state in every trial: Python's, NumPy's (when imported) and torch's."""
    random.seed(SEED)
    torch.manual_seed(SEED)
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy comes with torch's wheels
        return
    numpy.random.seed(SEED)


def reseed_after_first_step(seed: int) -> None:
    """Seed torch's generators (every device's) with `seed` once the first optimizer step of
    this process has ended: dropout and any later draw of torch's come out otherwise, while
    the model's initialisation and the data order the script drew before (a sampler's
    permutation for the epoch) stay as in every other trial. Any torch optimizer tells it,
    the inner one of DeepSpeed's and Megatron's included."""

    def reseed(*_: object) -> None:
        handle.remove()
        torch.manual_seed(seed)

    handle = register_optimizer_step_post_hook(reseed)


class Watch:
    """A trial's loss against the user's config's as each step ends (`ParityPlan.over`)."""

    def __init__(self, plan: ParityPlan, device: torch.device) -> None:
        self.plan, self.device = plan, device
        self.over_at: int | None = None
        """The first step whose loss left the user's, or None."""

    @property
    def active(self) -> bool:
        return bool(self.plan.reference)

    def step_ended(self, step: int, loss: float, collective: bool = True) -> None:
        """Step `step` (from 1) ended with this rank's loss `loss`; a collective where
        `collective` (every rank calls it at every step), so all ranks agree."""
        if not self.active or self.over_at is not None:
            return
        if collective:
            mean = over_ranks([loss], self.device)
            loss = mean[0] if mean else math.nan
        if self.plan.over(step, loss):
            self.over_at = step


class StepLoss:
    """The losses of the step under way, and the curve of the steps that ended."""

    def __init__(self) -> None:
        self.parts: list[torch.Tensor] = []
        self.summed = False
        self.whole: float | None = None
        self.curve: list[float] = []

    def add_micro(self, loss: torch.Tensor, summed: bool) -> None:
        """One micro-batch's loss, as its backward receives it; `summed`: the caller divided
        it by the accumulation already (DeepSpeed's `scale_wrt_gas=False`)."""
        if torch.is_tensor(loss):
            self.parts.append(loss.detach().float().mean())
            self.summed = summed

    def set_step(self, loss: object) -> None:
        """The whole step's loss, already averaged over its micro-batches."""
        self.whole = float(loss)  # type: ignore[arg-type]

    def end_step(self) -> None:
        """The step has ended: its loss joins the curve (NaN where none was told)."""
        if self.whole is not None:
            value = self.whole
        elif self.parts:
            total = float(torch.stack(self.parts).sum().item())
            value = total if self.summed else total / len(self.parts)
        else:
            value = math.nan
        self.curve.append(value)
        self.parts, self.whole = [], None


def over_ranks(curve: list[float], device: torch.device) -> tuple[float, ...]:
    """Each step's loss averaged over the ranks (a collective: every rank calls it with as
    many steps); () where a step's loss is unknown on some rank."""
    if not curve:
        return ()
    tensor = torch.tensor(curve, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    mean = (tensor / dist.get_world_size()).tolist()
    return () if any(math.isnan(v) for v in mean) else tuple(mean)


def known(curve: list[float]) -> tuple[float, ...]:
    """One rank's curve as the trial's, where the framework's log already averaged it over
    the ranks; () where a step's loss is unknown."""
    return () if any(math.isnan(v) for v in curve) else tuple(curve)
