"""Search strategies by name. Guided and grid enqueue their proposals; the others are
Optuna samplers. The study stays an ordinary Optuna study either way."""

from __future__ import annotations

import optuna

from autotune.errors import InputError, did_you_mean

STRATEGIES = ("guided", "tpe", "gp", "random", "grid")
ENQUEUEING = frozenset({"guided", "grid"})
"""Strategies that choose each config themselves and enqueue it."""


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler behind a strategy (for enqueueing ones, it never has to choose)."""
    if name == "tpe":
        # Few startup trials: the valid set is small and every trial costs real minutes.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, multivariate=True)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=4)
    if name in ("random", *ENQUEUEING):
        return optuna.samplers.RandomSampler(seed=seed)
    hint = did_you_mean(name, STRATEGIES)
    raise InputError(f"unknown sampler {name!r}; samplers: {', '.join(STRATEGIES)}{hint}")
