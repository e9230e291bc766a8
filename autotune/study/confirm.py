"""Before naming the winner: re-measure the leaders with longer trials when their difference
is within measurement noise and a trial's own measurement is not precise (a trial measured
to its precision target stands: a second launch of it would sample the noise between launches,
not shrink it), and let those longer measurements decide."""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import TrainConfig
from autotune.study.noise import noise
from autotune.study.trial_attrs import (
    CONFIG,
    CONFIRMS,
    PRUNED_AS,
    PRUNED_REASON,
    SOURCE,
    STOPPED_FOR,
    Pruned,
)

CONTENDERS = 3
"""The best trial and up to this many minus one runners-up."""
LONGER = 3
"""Confirmation trials measure this many times the steps."""


def _confirmations(study: optuna.Study, states: tuple[TrialState, ...]) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=states) if CONFIRMS in t.user_attrs]


def standing(study: optuna.Study) -> list[FrozenTrial]:
    """Each completed config's standing measurement: its latest confirmation (the longer
    trial) where it has one, else its own trial; a config whose latest confirmation failed
    (out of memory at length, a crash) does not stand. The winner is the best of these, so a
    trial that runs after a confirmation (a resumed study, another worker) can still win."""
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None
    ]
    latest = {
        t.user_attrs[CONFIRMS]: t
        for t in _confirmations(study, (TrialState.COMPLETE, TrialState.FAIL))
    }
    standing = [latest.get(t.number, t) for t in done if CONFIRMS not in t.user_attrs]
    return [t for t in standing if t.state == TrialState.COMPLETE]


def _being_confirmed(study: optuna.Study) -> set[int]:
    """Trials with a longer re-measurement running or done (a queued one another worker's
    loop took and skipped does not count)."""
    states = (TrialState.RUNNING, TrialState.COMPLETE, TrialState.FAIL)
    return {t.user_attrs[CONFIRMS] for t in _confirmations(study, states)}


def contenders(study: optuna.Study) -> list[FrozenTrial]:
    """The trials to re-measure with longer trials: of the leader and the runners-up within
    noise of it, those measured short of their precision target and not measured longer yet
    (nor being so by another worker); [] when the leader stands alone."""
    ranked = sorted(
        (t for t in standing(study) if t.user_attrs.get(SOURCE) == "measured"),
        key=lambda t: -t.value,  # type: ignore[operator]
    )
    if len(ranked) < 2:
        return []
    best = ranked[0]
    close = [t for t in ranked[1:CONTENDERS] if t.value >= best.value * (1 - noise(best, t))]  # type: ignore[operator]
    confirming = _being_confirmed(study)
    unconfirmed = [
        t
        for t in [best, *close]
        if CONFIRMS not in t.user_attrs
        and t.number not in confirming
        and t.user_attrs.get(STOPPED_FOR) != "precise"
    ]
    return unconfirmed if close else []


def confirm(
    study: optuna.Study,
    params_of: Callable[[TrainConfig], dict[str, object]],
    distributions: dict[str, optuna.distributions.BaseDistribution],
    run: Callable[[optuna.Trial, TrainConfig], object],
    time_left: Callable[[], bool] = lambda: True,
) -> list[int]:
    """Run one longer trial per contender while `time_left()`; returns the new trials'
    numbers. Another worker may take the queued trial (Optuna hands out the oldest waiting
    one): a trial that is not this contender's confirmation is given back as pruned."""
    numbers = []
    for original in contenders(study):
        if not time_left() or original.number in _being_confirmed(study):
            continue
        config = TrainConfig(**original.user_attrs[CONFIG])
        study.enqueue_trial(params_of(config), user_attrs={CONFIRMS: original.number})
        trial = study.ask(distributions)
        if trial.user_attrs.get(CONFIRMS) != original.number:
            trial.set_user_attr(PRUNED_AS, Pruned.CLAIMED)
            trial.set_user_attr(PRUNED_REASON, "took another worker's queued trial")
            study.tell(trial, state=TrialState.PRUNED)
            continue
        run(trial, config)
        numbers.append(trial.number)
    return numbers
