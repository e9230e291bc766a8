"""Optuna samplers by name; the loop never depends on which one it got."""

from __future__ import annotations

import optuna

from autotune.errors import InputError

SAMPLERS = ("tpe", "random")


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        # Few startup trials: the valid set is small and every trial costs real minutes.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise InputError(f"unknown sampler {name!r}; samplers: {', '.join(SAMPLERS)}")
