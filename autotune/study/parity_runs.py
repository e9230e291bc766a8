"""The trials loss parity asks of a study of the user's command, beside the search's: the
user's config as the reference (run first, again after a failure, once reseeded:
`study.verdict.reference`), the one-knob trial that tells which move breaks parity
(`parity_cause`), and the winner's check run over the whole band before it is exported."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from autotune import runner as trials
from autotune.problem import Problem
from autotune.space import TrainConfig, config_key
from autotune.space.table import ConfigTable
from autotune.study.choices import StudySpace
from autotune.study.record.optuna_private import ask_enqueued
from autotune.study.record.storage import fail_abandoned_trials
from autotune.study.record.trial_attrs import (
    AFTER_CHOICE,
    CONFIRMS,
    NO_REFERENCE,
    ONE_KNOB,
    PARITY_RESEED,
    SEEDED_BY,
    USERS_CONFIG,
    USERS_CONFIG_FROM,
    TrialAttrs,
)
from autotune.study.record.verdicts import AWAIT_S, verdicts
from autotune.study.verdict import reference
from autotune.study.verdict.confirm import standings
from autotune.study.verdict.noise import measurements
from autotune.study.verdict.parity import study_band
from autotune.study.verdict.parity_cause import Causes, read_causes
from autotune.trial.spec import ParityPlan, StepPlan

Launch = Callable[[optuna.Trial, TrainConfig, str, StepPlan, ParityPlan], trials.TrialRecord]
"""Runs a config as a trial for a plan, with what its ranks do for parity."""


def users_config(problem: Problem, study: optuna.Study, valid: ConfigTable) -> TrainConfig | None:
    """The config the user's command runs today, when it is a valid config of the space: the
    reference, measured before anything else, so that the winner is compared with what they
    have and every config is judged against it. A new study keeps its key (`USERS_CONFIG`)
    and where it came from, or why there is none (`NO_REFERENCE`); a resumed one keeps what
    it began with."""
    if problem.job is None:
        return None
    config, source = problem.users_reference()
    if config is not None and valid.row_of(config) is None:
        source = f"your config ({config.label()}) is not in the search space"
        config = None
    if not study.get_trials(deepcopy=False):
        if config is not None:
            study.set_user_attr(USERS_CONFIG, config_key(config))
            study.set_user_attr(USERS_CONFIG_FROM, source)
        else:
            study.set_user_attr(NO_REFERENCE, source)
    key = study.user_attrs.get(USERS_CONFIG)
    return config if config is not None and config_key(config) == key else None


@dataclass(frozen=True)
class ParityRuns:
    """What one worker runs for parity, through the search's own launch (`launch`)."""

    study: optuna.Study
    space: StudySpace
    users: TrainConfig
    steps: StepPlan
    """The study's step plan: the reference's runs are longer (`reference_plan`)."""
    precision: str
    launch: Launch
    valid: ConfigTable
    """The space's valid configs: a one-knob trial runs only one of them."""

    def reference(self) -> tuple[bool, trials.TrialRecord | None]:
        """Run or await what the reference needs before anything else: whether it acted,
        and the run it made (its first or another after a failure, not the reseeded one)."""
        step = reference.next_step(self.study)
        if step.step == "none" and step.why:
            reference.give_up(self.study, step.why)
        if step.step in ("none", "ready"):
            return False, None
        if step.step == "wait":  # another worker runs it: nothing is judged before it
            time.sleep(AWAIT_S)
            fail_abandoned_trials(self.study)
            return True, None
        plan = reference.reference_plan(self.steps)
        marks: dict[str, object] = {SEEDED_BY: "user"}
        parity = ParityPlan()
        if step.step == "reseeded":
            marks = {CONFIRMS: step.confirms, PARITY_RESEED: reference.RESEED}
            parity = ParityPlan(reseed=reference.RESEED)
            plan = dataclasses.replace(plan, profile=False)
        params = self.space.params(self.users)
        trial = ask_enqueued(self.study, params, marks, self.space.distributions)
        if trial is None:  # another worker took it first
            return True, None
        record = self.launch(trial, self.users, config_key(self.users), plan, parity)
        return True, record if step.step != "reseeded" else None

    def one_knob(self, causes: Causes | None, seen: set[str]) -> tuple[str, TrainConfig] | None:
        """The knob and the user's config with that one move, which tells which move of a
        flagged trial changes the training (`Causes.next_one_knob`), where it can run and
        has no verdict."""
        move = causes.next_one_knob() if causes is not None else None
        if move is None:
            return None
        knob, value = move
        config = dataclasses.replace(self.users, **{knob: value})
        if config_key(config) in seen or self.valid.row_of(config) is None:
            return None
        return knob, config

    def covers(self, first: int) -> bool:
        """Whether a run of the config whose first trial is `first` covers the band."""
        against = study_band(self.study, self.precision)
        runs = measurements(self.study).get(first, [])
        longest = max((len(TrialAttrs.of(t).losses) for t in runs), default=0)
        return against is None or longest >= len(against.floor)

    def plan(self) -> ParityPlan:
        """The user's curve and floors, for a trial to stop once its loss leaves them."""
        against = study_band(self.study, self.precision)
        return against.plan() if against is not None else ParityPlan()

    def check_winner(self, time_left: Callable[[], bool]) -> list[int]:
        """The winner judged over the user's whole band before it is exported: where it is
        not the user's config and none of its runs covers the band, one run as long as the
        reference's, after its choice (its figures come from it too). One that leaves the
        user's curve fails as `differs`, the config no longer stands, and the next winner
        is checked alike; returns the trials run."""
        numbers: list[int] = []
        checked: set[int] = set()
        while time_left():
            ranked = standings(self.study)
            against = study_band(self.study, self.precision)
            if not ranked or against is None or ranked[0].first in checked:
                break
            best = ranked[0]
            checked.add(best.first)
            attrs = TrialAttrs.of(best.trial)
            if attrs.config_key == self.study.user_attrs.get(USERS_CONFIG):
                break
            if self.covers(best.first):
                break
            marks: dict[str, object] = {CONFIRMS: best.first, AFTER_CHOICE: True}
            params = self.space.params(attrs.config)
            trial = ask_enqueued(self.study, params, marks, self.space.distributions)
            if trial is None:
                break
            plan = dataclasses.replace(reference.reference_plan(self.steps), profile=False)
            self.launch(trial, attrs.config, str(attrs.config_key), plan, against.plan())
            numbers.append(trial.number)
            numbers += self._cause_of_flags()
        return numbers

    def _cause_of_flags(self) -> list[int]:
        """One-knob trials, while a flagged trial's cause is unknown: a convicted knob takes
        every config that moves it out of the standings at once (`confirm.standings`)."""
        numbers: list[int] = []
        while one := self.one_knob(read_causes(self.study), set(verdicts(self.study))):
            knob, config = one
            marks: dict[str, object] = {ONE_KNOB: knob}
            trial = ask_enqueued(
                self.study, self.space.params(config), marks, self.space.distributions
            )
            if trial is None:
                break
            plan = reference.reference_plan(self.steps)
            self.launch(trial, config, config_key(config), plan, self.plan())
            numbers.append(trial.number)
        return numbers
