"""Loss parity: a config whose loss curve leaves the user's config's by more than the
run-to-run floor trains another model; the summary says which knob and by how much."""

from __future__ import annotations

import dataclasses

import optuna

from autotune.space import TrainConfig, config_key
from autotune.specs.loading import load_cluster, load_workload
from autotune.study import parity
from autotune.study.trial_attrs import ERROR, KIND, USERS_CONFIG
from tests.fakes import add_measured, measured_attrs, new_study

YOURS = TrainConfig(dp=2, mbs=8)
CURVE = (6.41, 6.42, 6.44, 6.40, 6.42, 6.46, 6.37, 6.47)
"""The DeepSpeed test script's first losses (results/bench/parity.md)."""


def drifted(share: float) -> tuple[float, ...]:
    """CURVE, its steps moved further and further, to `share` at the last."""
    last = len(CURVE) - 1
    return tuple(v * (1 + share * i / last) for i, v in enumerate(CURVE))


def jittered(share: float) -> tuple[float, ...]:
    """CURVE with each step moved by `share`, up and down: a dropout mask drawn otherwise."""
    return tuple(v * (1 + share * (-1) ** i) for i, v in enumerate(CURVE))


def test_a_learning_rate_that_follows_the_micro_batch_differs_and_says_where() -> None:
    found = parity.judge(drifted(0.03), [CURVE], "fp32")
    assert found is not None
    assert found.verdict == parity.DIFFERS
    assert (found.at_step, found.steps) == (8, 8)
    assert abs(found.largest - 0.03) < 1e-9
    assert (found.floor, found.floor_from) == (parity.PRECISION_FLOOR["fp32"], "precision")


def test_zero_stage_and_micro_batch_changes_are_the_same_model() -> None:
    assert parity.judge(CURVE, [CURVE], "fp32").verdict == "same"  # type: ignore[union-attr]
    # a micro-batch regrouping dropout's draws: 0.16% a step on the test scripts
    assert parity.judge(jittered(0.0016), [CURVE], "fp32").verdict == "same"  # type: ignore[union-attr]
    # a trial that ran fewer steps is compared over the steps both ran
    assert parity.judge(CURVE[:3], [CURVE], "fp32").steps == 3  # type: ignore[union-attr]


def test_the_floor_comes_from_the_users_repeats_when_they_differ_more() -> None:
    found = parity.judge(drifted(0.015), [CURVE, jittered(0.01)], "fp32")
    assert found is not None
    assert found.floor_from == "repeats"
    assert abs(found.floor - parity.REPEAT_MARGIN * 0.01) < 0.001
    assert found.verdict == "same"  # 1.5% is within twice the 1% the user's own runs differ by
    half = parity.judge(drifted(0.01), [CURVE], "bf16")
    assert half is not None and half.verdict == "same"  # bf16 rounds 8 bits: a wider floor


def test_no_loss_means_no_verdict() -> None:
    assert parity.judge((), [CURVE], "fp32") is None
    assert parity.judge(CURVE, [], "fp32") is None


def study_with_users_config() -> tuple[optuna.Study, int]:
    study = new_study()
    study.set_user_attr(USERS_CONFIG, config_key(YOURS))
    workload = dataclasses.replace(load_workload("tiny"), precision="fp32")
    study.set_user_attr("workload", dataclasses.asdict(workload))
    study.set_user_attr("cluster", dataclasses.asdict(load_cluster("local:2")))
    study.set_user_attr("engine", "deepspeed")
    return study, add_measured(
        study, 1000.0, YOURS, losses=list(CURVE), config_key=config_key(YOURS)
    )


def test_the_summary_names_the_knob_and_exports_the_users_config_when_none_is_the_same() -> None:
    study, _ = study_with_users_config()
    changed = TrainConfig(dp=2, mbs=4)
    found = parity.judge(drifted(0.03), [CURVE], "fp32")
    assert found is not None
    error = parity.differs_note(found, parity.changed_knobs(changed, YOURS), "your config")
    attrs = measured_attrs(
        changed, losses=list(drifted(0.03)), **{KIND: parity.DIFFERS, ERROR: error}
    )
    study.add_trial(
        optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs=attrs)
    )
    line = parity.summary_line(study)
    assert line is not None and line.startswith("parity: your config is exported")
    assert "no other config trains the same model" in line
    assert "mbs 8->4 moves the loss 3.0% at step 8 of 8 (floor 0.5%, from precision)" in line


def test_the_summary_says_same_with_the_largest_difference_and_the_floor() -> None:
    study, _ = study_with_users_config()
    zero3 = TrainConfig(dp=2, zero=3, mbs=8)
    add_measured(study, 2000.0, zero3, losses=list(jittered(0.001)), config_key=config_key(zero3))
    line = parity.summary_line(study)
    assert line == (
        "parity: same: the loss stays within 0.1% of your config's over 8 steps "
        "(floor 0.5%, from precision)"
    )
