"""NCCL settings reach the export only where they beat NCCL's own choices by more than noise."""

from __future__ import annotations

import optuna

from autotune.export.nccl_verdict import nccl_verdict
from autotune.space import TrainConfig

A = TrainConfig(dp=8)
A_RING = TrainConfig(dp=8, nccl_algo="Ring")
B_TREE = TrainConfig(dp=4, tp=2, nccl_algo="Tree")


def study_of(*trials: tuple[TrainConfig, float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for config, tokens in trials:
        attrs = {"config": config.as_dict(), "step_time_s": 1.0, "step_time_stdev_s": 0.01}
        study.add_trial(optuna.trial.create_trial(value=tokens, user_attrs=attrs))
    return study


def best(study: optuna.Study) -> optuna.trial.FrozenTrial:
    return max(study.trials, key=lambda t: t.value or 0.0)


def test_a_setting_that_beats_the_default_by_more_than_noise_is_kept() -> None:
    study = study_of((A, 100.0), (A_RING, 110.0))
    verdict = nccl_verdict(study, best(study))
    assert verdict.trial.number == 1
    assert verdict.note is not None and "+10.0% over NCCL's default (trial 0" in verdict.note


def test_a_gain_within_noise_exports_nccls_default() -> None:
    study = study_of((A, 100.0), (A_RING, 101.0))
    verdict = nccl_verdict(study, best(study))
    assert verdict.trial.number == 0  # the same layout with nothing set
    assert verdict.note is not None and "is not a gain at 95% confidence" in verdict.note


def test_a_setting_never_measured_against_the_default_is_not_kept() -> None:
    study = study_of((A, 100.0), (B_TREE, 120.0))
    verdict = nccl_verdict(study, best(study))
    assert verdict.trial.number == 0
    assert verdict.note is not None and "never measured against NCCL's default" in verdict.note


def test_nccls_own_choices_winning_needs_no_note() -> None:
    study = study_of((A, 100.0), (A_RING, 90.0))
    verdict = nccl_verdict(study, best(study))
    assert verdict.trial.number == 0 and verdict.note is None
