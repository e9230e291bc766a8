"""Why a trial was pruned is recorded, and the table shows only trials that ran."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.report.table import trial_table
from autotune.study.record.trial_attrs import CONFIG, CONFIG_KEY, PRUNED_AS, Pruned, pruned_as
from tests.study.test_guided import search


def test_a_random_search_records_why_each_skipped_proposal_was_skipped(tmp_path: Path) -> None:
    _, _, trials = search(tmp_path, "random", 0, 6)
    skipped = [t for t in trials if t.state == TrialState.PRUNED]
    assert skipped, "a random sampler proposes configs that break rules"
    assert {t.user_attrs[PRUNED_AS] for t in skipped} == {Pruned.REJECTED}


def pruned(study: optuna.Study, attrs: dict[str, object]) -> int:
    study.add_trial(optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs=attrs))
    return study.trials[-1].number


def test_the_table_lists_trials_stopped_early_but_not_those_never_run() -> None:
    study = optuna.create_study(direction="maximize")
    ran = {CONFIG: {"zero": 1}, CONFIG_KEY: "k1"}
    rejected = pruned(study, {PRUNED_AS: Pruned.REJECTED})
    claimed = pruned(study, {PRUNED_AS: Pruned.CLAIMED, "claim": "k1"})
    stopped = pruned(study, {**ran, PRUNED_AS: Pruned.STOPPED_EARLY})
    old_stopped = pruned(study, ran)  # a study from before `pruned_as`
    old_rejected = pruned(study, {})
    assert list(trial_table(study)["number"]) == [stopped, old_stopped]
    assert [pruned_as(study.trials[n]) for n in (rejected, claimed, old_rejected)] == [
        Pruned.REJECTED,
        Pruned.CLAIMED,
        Pruned.REJECTED,
    ]
