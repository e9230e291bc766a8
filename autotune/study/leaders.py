"""The leaders re-measured before the winner is named (`confirm`), and the winner's repeats
after its choice, as one run of the study takes them: how long each repeat measures, and
what its ranks do for loss parity."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

import optuna

from autotune.launchers import Launcher
from autotune.space import TrainConfig, config_key
from autotune.study.choices import StudySpace
from autotune.study.parity_runs import ParityRuns
from autotune.study.record.trial_attrs import USERS_CONFIG, TrialAttrs
from autotune.study.record.verdicts import best_value
from autotune.study.settings import Budget, SearchSettings
from autotune.study.slice.confirm import slice_ranking
from autotune.study.trial_run import Progress, StudyRun, run_one
from autotune.study.verdict.confirm import Ranking, confirm, repeat_winner, standings
from autotune.study.verdict.noise import measurements
from autotune.study.verdict.reference import reference_plan
from autotune.study.verdict.slice_standings import slice_standings
from autotune.trial.spec import ParityPlan

MIN_REPEATS = 2
"""Repeats allowed however few trials the search ran: one round of two contenders."""


class Searching(Protocol):
    """What a run of the study's loop gives its confirmation."""

    study: optuna.Study
    study_run: StudyRun
    settings: SearchSettings
    budget: Budget
    launcher: Launcher
    space: StudySpace
    progress: Progress
    parity: ParityRuns | None
    ran: int

    def best_step_time(self, besides: int | None = None) -> tuple[float, int] | None: ...
    def trial_precision(self) -> float: ...
    def parity_plan(self) -> ParityPlan: ...
    def time_left(self) -> bool: ...


def winner_at_full(search: Searching) -> bool:
    """A slice study whose leaders run at full size: its winner is chosen there and
    repeated there (`slice.confirm.repeat_full_winner`), not on the slice."""
    s = search.settings.slice
    return search.study_run.slice is not None and s is not None and s.confirm_full > 0


def confirm_leaders(search: Searching) -> list[int]:
    """Interleaved repeats of the leaders the best is not surely faster than (measured runs
    only), none stopped as slower, each to the precision the between-trial spread asks (a
    runner-up's to half its distance from the best where wider), profiled only where the
    config has no profile yet and it could win, while the time budget lasts, and at most
    `Effort.repeats_per_trial` repeats per trial the search ran (a user's command relaunches
    for each); then the winner's repeats after its choice (`Effort.after_choice`), its
    figures' source (at full size, later, for a slice study that confirms its leaders
    there); the first of them as long as the user's runs where the winner's do not yet
    cover them (its parity is judged over them all)."""
    budget = search.budget
    if not budget.confirm or search.launcher.source != "measured":
        return []
    ranking: Ranking = standings
    if search.study_run.slice is not None:
        at_full = winner_at_full(search)
        ranking = slice_ranking(search.study_run) if at_full else slice_standings
    run_confirmation = _confirmation(search)
    space = search.space
    numbers = confirm(
        search.study,
        space.params,
        space.distributions,
        run_confirmation,
        search.time_left,
        limit=max(MIN_REPEATS, budget.effort.repeats_per_trial * search.ran),
        effort=budget.effort,
        ranking=ranking,
    )
    if winner_at_full(search):
        return numbers
    return numbers + repeat_winner(
        search.study,
        space.params,
        space.distributions,
        run_confirmation,
        budget.effort.after_choice,
        search.time_left,
    )


def _confirmation(search: Searching) -> Callable[[optuna.Trial, TrainConfig], None]:
    """How one repeat runs. Never stopped as slower; a runner-up's repeat is measured against
    the best's mean step time, so that one far behind is ranked by an interval of half its
    gap where that is wider than the spread asks, and not profiled; the winner's repeats
    after its choice state its figures, at full precision. Profiled only if none of the
    config's trials was yet (one early stopping cut short, say)."""
    study = search.study

    def run(trial: optuna.Trial, config: TrainConfig) -> None:
        attrs = TrialAttrs.of(trial)
        first = attrs.confirms
        ran = measurements(study).get(first, []) if first is not None else []
        best = None if attrs.after_choice else search.best_step_time(first)
        repeat = dataclasses.replace(
            search.settings.steps,
            precision=search.trial_precision(),
            best_s=best[0] if best else None,
            margin=None,
            profile=not any(TrialAttrs.of(t).profile for t in ran),
        )
        key = config_key(config)
        yours = key == study.user_attrs.get(USERS_CONFIG)
        parity = search.parity
        if attrs.after_choice and not yours and parity and not parity.covers(first or -1):
            repeat = dataclasses.replace(reference_plan(search.settings.steps), profile=False)
        plan = ParityPlan() if yours else search.parity_plan()
        record = run_one(search.study_run, trial, config, key, repeat, parity=plan)
        label = f"{config.label()} (repeat of trial {first})"
        search.progress.finished(trial.number, label, record, best_value(study))

    return run
