"""A step's loss as a trial records it: averaged over the step's micro-batches, or summed where
the caller already divided them by the accumulation (the Trainer), and one seed for all."""

from __future__ import annotations

import math

import torch

from autotune.rank.loss import StepLoss, known, seed_everything


def test_a_scripts_micro_batch_losses_are_averaged_and_the_trainers_summed() -> None:
    script, trainer = StepLoss(), StepLoss()
    for loss in (6.0, 6.4):  # DeepSpeed divides these by the accumulation itself
        script.add_micro(torch.tensor(loss), summed=False)
    for loss in (3.0, 3.2):  # the Trainer passed loss / accumulation, scale_wrt_gas=False
        trainer.add_micro(torch.tensor(loss), summed=True)
    script.end_step()
    trainer.end_step()
    assert abs(script.curve[0] - 6.2) < 1e-6
    assert abs(trainer.curve[0] - 6.2) < 1e-6


def test_a_whole_steps_loss_wins_and_an_untold_step_leaves_the_curve_unknown() -> None:
    tally = StepLoss()
    tally.add_micro(torch.tensor(9.0), summed=False)
    tally.set_step(6.1)  # a pipeline's train_batch, or done(loss=...)
    tally.end_step()
    tally.end_step()  # done() without a loss
    assert tally.curve[0] == 6.1 and math.isnan(tally.curve[1])
    assert known(tally.curve) == ()
    assert known([6.1, 6.0]) == (6.1, 6.0)


def test_every_trial_starts_from_one_seed() -> None:
    seed_everything()
    first = torch.rand(3)
    torch.rand(5)
    seed_everything()
    assert torch.equal(torch.rand(3), first)
