"""Workers that collide on a config: the one whose trial gave way with the lowest number
retries it; the others leave it to that worker only for a while."""

from __future__ import annotations

import datetime

import optuna
from optuna.trial import TrialState

from autotune.study.record.trial_attrs import CLAIM, PRUNED_AS, Pruned
from autotune.study.record.verdicts import collisions


def gave_way(study: optuna.Study, key: str, as_: Pruned = Pruned.CLAIMED) -> int:
    trial = study.ask()
    trial.set_user_attr(CLAIM, key)
    trial.set_user_attr(PRUNED_AS, as_)
    study.tell(trial, state=TrialState.PRUNED)
    return trial.number


def test_a_collision_names_its_lowest_loser_and_is_forgotten_after_the_window() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    before = datetime.datetime.now() - datetime.timedelta(seconds=1)
    first = gave_way(study, "a")
    gave_way(study, "a")
    gave_way(study, "b", Pruned.REJECTED)  # refused for a rule: no collision
    second = gave_way(study, "c")
    assert collisions(study, since=before) == {"a": first, "c": second}
    later = datetime.datetime.now() + datetime.timedelta(seconds=1)
    assert collisions(study, since=later) == {}
