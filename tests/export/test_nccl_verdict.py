"""NCCL settings reach the export only where they beat NCCL's own choices by more than noise."""

from __future__ import annotations

import optuna

from autotune.space import TrainConfig
from autotune.study.verdict._nccl_verdict import nccl_verdict
from tests.fakes import add_measured, measured_study, new_study

A = TrainConfig(dp=8)
A_RING = TrainConfig(dp=8, nccl_algo="Ring")
B_TREE = TrainConfig(dp=4, tp=2, nccl_algo="Tree")


def study_of(*trials: tuple[TrainConfig, float]) -> optuna.Study:
    return measured_study(*trials, source=None)


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
    assert verdict.note is not None and "is not a gain at 99% confidence" in verdict.note


def test_a_setting_never_measured_against_the_default_is_not_kept() -> None:
    study = study_of((A, 100.0), (B_TREE, 120.0))
    verdict = nccl_verdict(study, best(study))
    assert verdict.trial.number == 0
    assert verdict.note is not None and "never measured against NCCL's default" in verdict.note


def test_nccls_own_choices_winning_needs_no_note() -> None:
    study = study_of((A, 100.0), (A_RING, 90.0))
    verdict = nccl_verdict(study, best(study))
    assert verdict.trial.number == 0 and verdict.note is None


def repeated_study(*trials: tuple[TrainConfig, float, int | None]) -> optuna.Study:
    """Measured trials; the third item is the trial a repeat repeats (None: a search trial)."""
    study = new_study()
    for config, tokens, repeats in trials:
        add_measured(study, tokens, config, confirms=repeats)
    return study


def test_the_trial_that_made_a_setting_lead_does_not_vote_for_it() -> None:
    """Its search trial read 15% fast (why it led); its repeats match NCCL's default: the
    interleaved repeats decide, and nothing is set."""
    study = repeated_study(
        (A, 100.0, None),
        (A_RING, 115.0, None),
        *((A_RING, t, 1) for t in (100.0, 101.0, 99.0)),
        *((A, t, 0) for t in (101.0, 99.0, 100.0)),
    )
    verdict = nccl_verdict(study, study.trials[4])
    assert (
        verdict.note is not None and "is not kept" in verdict.note and "3 repeats" in verdict.note
    )
    study = repeated_study(
        (A, 100.0, None),
        (A_RING, 111.0, None),
        *((A_RING, t, 1) for t in (110.0, 111.0, 109.0)),
        *((A, t, 0) for t in (101.0, 99.0, 100.0)),
    )
    verdict = nccl_verdict(study, study.trials[4])
    assert verdict.note is not None and verdict.note.startswith("Measured gain")


def test_a_measured_setting_never_repeated_is_not_kept() -> None:
    study = repeated_study((A, 100.0, None), (A_RING, 120.0, None))
    verdict = nccl_verdict(study, study.trials[1])
    assert verdict.trial.number == 0
    assert verdict.note is not None and "not repeated against NCCL's default" in verdict.note


def test_a_setting_whose_repeats_after_its_choice_read_as_the_default_is_not_kept() -> None:
    """Its repeats read 10% fast (among variants repeated alike, the fastest-reading leads),
    its two repeats after it was chosen match NCCL's default: those decide, and nothing is
    set; where they too read 10% fast, it is kept."""
    for after, kept in (((100.0, 101.0), False), ((110.0, 111.0), True)):
        study = repeated_study(
            (A, 100.0, None),
            (A_RING, 111.0, None),
            *((A_RING, t, 1) for t in (110.0, 111.0, 109.0)),
            *((A, t, 0) for t in (101.0, 99.0, 100.0)),
        )
        for value in after:
            add_measured(study, value, A_RING, confirms=1, after_choice=True)
        verdict = nccl_verdict(study, study.trials[-1])
        assert verdict.note is not None
        assert verdict.note.startswith("Measured gain") is kept, verdict.note
        assert "2 repeats after its choice" in verdict.note
