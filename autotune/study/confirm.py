"""Before naming the winner: re-measure the leaders with longer trials when their difference
is within measurement noise, and let those longer measurements decide."""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import TrainConfig
from autotune.study.noise import noise

CONTENDERS = 3
"""The best trial and up to this many minus one runners-up."""
LONGER = 3
"""Confirmation trials measure this many times the steps."""


def contenders(study: optuna.Study) -> list[FrozenTrial]:
    """The best measured trial and the runners-up within noise of it; [] if it stands alone."""
    done = sorted(
        (
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("source") == "measured" and "confirms" not in t.user_attrs
        ),
        key=lambda t: -t.value,
    )  # type: ignore[operator]
    if len(done) < 2 or any("confirms" in t.user_attrs for t in study.get_trials(deepcopy=False)):
        return []  # confirmed already, or another worker is confirming
    best = done[0]
    close = [t for t in done[1:CONTENDERS] if t.value >= best.value * (1 - noise(best, t))]  # type: ignore[operator]
    return [best, *close] if close else []


def confirm(
    study: optuna.Study,
    params_of: Callable[[TrainConfig], dict[str, object]],
    distributions: dict[str, optuna.distributions.BaseDistribution],
    run: Callable[[optuna.Trial, TrainConfig], object],
) -> list[int]:
    """Run one longer trial per contender; returns the new trials' numbers."""
    numbers = []
    for original in contenders(study):
        config = TrainConfig(**original.user_attrs["config"])
        study.enqueue_trial(params_of(config), user_attrs={"confirms": original.number})
        trial = study.ask(distributions)
        run(trial, config)
        numbers.append(trial.number)
    return numbers
