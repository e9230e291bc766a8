"""Which of a slice study's workers runs each scale probe and full-size launch, and what one
that was stopped or died leaves behind: each worker marks the trial it queues before it
looks, the lower-numbered of two runs, the other awaits it, and an interrupted one holds
nothing, so it runs again."""

from __future__ import annotations

import time
from collections.abc import Callable

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.study.record.optuna_private import ask_enqueued, fail_trial
from autotune.study.record.storage import INTERRUPTED, fail_abandoned_trials
from autotune.study.record.trial_attrs import ERROR, KIND, Pruned, TrialAttrs
from autotune.study.record.verdicts import AWAIT_S, skip

TimeLeft = Callable[[], bool]
"""Whether the study's `--max-time` leaves time for another trial."""


def take(
    study: optuna.Study,
    mark: str,
    leader: int,
    params: dict[str, object],
    distributions: dict[str, BaseDistribution],
) -> optuna.Trial | int | None:
    """Queue and take this worker's probe or full-size launch of `leader` (marked `mark`):
    the trial to run; or the number of another worker's trial it gave way to (`gave_way`),
    to await; or None where a worker queueing the same took it first."""
    trial = ask_enqueued(study, params, {mark: leader}, distributions)
    if trial is None:
        return None
    other = gave_way(study, trial, mark)
    return trial if other is None else other


def gave_way(study: optuna.Study, trial: optuna.Trial, mark: str) -> int | None:
    """The number of another worker's trial that `trial` (a probe or a full-size launch,
    marked `mark`) gave way to, or None: each worker marks before it looks, and the
    lower-numbered one runs, so of two workers that take one at once exactly one launches
    it."""
    value = trial.user_attrs[mark]
    other = next(
        (
            t.number
            for t in study.get_trials(deepcopy=False)
            if t.number < trial.number and t.user_attrs.get(mark) == value and holds_mark(t)
        ),
        None,
    )
    if other is not None:
        skip(study, trial, Pruned.CLAIMED, f"taken by trial {other} of another worker")
    return other


def holds_mark(t: FrozenTrial) -> bool:
    """Whether a probe or full-size launch `t` holds its mark: queued, running or ended, but
    not given way (PRUNED) nor interrupted (its tuner died or was stopped: it runs again)."""
    return t.state != TrialState.PRUNED and TrialAttrs.of(t).kind != INTERRUPTED


def marked(study: optuna.Study, mark: str) -> set[int]:
    """The leaders (first trial numbers) that a probe or full-size launch (`mark`) holds."""
    trials = study.get_trials(deepcopy=False)
    return {t.user_attrs[mark] for t in trials if mark in t.user_attrs and holds_mark(t)}


def any_interrupted(study: optuna.Study, numbers: list[int]) -> bool:
    """Whether any of trials `numbers` was interrupted."""
    trials = study.get_trials(deepcopy=False)
    return any(TrialAttrs.of(trials[n]).kind == INTERRUPTED for n in numbers)


ORPHANED_S = 60.0
"""A probe or full-size launch still queued after this long was queued by a worker that
died before it took it (a worker takes its own at once)."""


def await_trials(study: optuna.Study, numbers: list[int], time_left: TimeLeft) -> None:
    """Until other workers' trials `numbers` have ended (or the time budget), so that what
    they measure is read with this worker's own. One left queued `ORPHANED_S` is failed as
    interrupted, as a running one whose tuner died is."""
    ongoing = (TrialState.RUNNING, TrialState.WAITING)
    queued_since: dict[int, float] = {}
    while time_left():
        trials = study.get_trials(deepcopy=False)
        left = [trials[n] for n in numbers if trials[n].state in ongoing]
        if not left:
            return
        now = time.monotonic()
        for t in left:
            if (
                t.state == TrialState.WAITING
                and now - queued_since.setdefault(t.number, now) > ORPHANED_S
            ):
                fail_trial(
                    study, t, {KIND: INTERRUPTED, ERROR: "queued by a tuner that never took it"}
                )
        time.sleep(AWAIT_S)
        fail_abandoned_trials(study)
