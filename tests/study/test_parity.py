"""Loss parity: a config whose loss curve leaves the user's config's by more than the
run-to-run floor trains another model; the summary says which knob and by how much."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, cast

import optuna
import pytest
import yaml

from autotune.space import TrainConfig, config_key
from autotune.specs.loading import load_cluster, load_workload
from autotune.study import parity
from autotune.study.trial_attrs import ERROR, KIND, USERS_CONFIG
from tests.conftest import REPO, autotune
from tests.fakes import add_measured, measured_attrs, new_study

SCRIPTS = REPO / "tests" / "data" / "user_scripts"

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


def test_a_loss_that_turns_nan_or_inf_is_never_the_same_model() -> None:
    for bad in (float("nan"), float("inf")):
        curve = (*CURVE[:4], bad, *CURVE[5:])
        found = parity.judge(curve, [CURVE], "fp32")
        assert found is not None and found.verdict == parity.DIFFERS
        assert found.at_step == 5
    # a user's repeat that diverged sets no floor: the precision floor stands
    diverged = (*CURVE[:4], float("nan"), *CURVE[5:])
    found = parity.judge(drifted(0.03), [CURVE, diverged], "fp32")
    assert found is not None and found.verdict == parity.DIFFERS
    assert found.floor_from == "precision"


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


def test_a_data_order_that_follows_the_micro_batch_differs() -> None:
    """The same samples' losses, met in another order (a shuffle seeded with the micro-batch:
    the test scripts' --shuffle-per-mbs): the curve leaves the user's at the steps whose
    samples moved, though no step's loss is new."""
    study, _ = study_with_users_config()
    reordered = (*CURVE[4:], *CURVE[:4])  # the second half of the epoch first
    found = parity.of_trial(study, 99, reordered, "fp32")
    assert found is not None and found.verdict == parity.DIFFERS
    assert abs(found.largest - (6.44 - 6.37) / 6.37) < 1e-9
    assert found.at_step == 7
    note = parity.differs_note(found, parity.changed_knobs(TrainConfig(dp=2, mbs=4), YOURS), "x")
    assert note.startswith("trains another model than x: mbs 8->4 moves the loss 1.1% at step 7")


def test_a_global_batch_that_follows_the_micro_batch_differs() -> None:
    """A micro-batch of 16 at the user's accumulation (the scripts' --gas-follows-mbs): twice
    the samples a step at the same learning rate, so the loss falls otherwise from the second
    step, while a micro-batch change at the user's global batch stays within the floor."""
    study, _ = study_with_users_config()
    doubled = (CURVE[0], *(v * (1 - 0.01 * i / 7) for i, v in enumerate(CURVE) if i))
    found = parity.of_trial(study, 99, doubled, "fp32")
    assert found is not None and found.verdict == parity.DIFFERS
    assert (found.steps, found.at_step) == (8, 8)
    kept = parity.of_trial(study, 98, jittered(0.0016), "fp32")  # at the user's global batch
    assert kept is not None and kept.verdict == "same"


SPACE = "engine: deepspeed\nknobs:\n  zero: [0, 3]\n  mbs: [4, 8]\n"
"""ZeRO 0 or 3 and micro-batch 4 or 8 at ds_config.json's global batch of 16."""


@pytest.fixture(scope="module")
def lr_follows_mbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A real study of the DeepSpeed test script whose learning rate follows the micro-batch:
    its output and its results folder. Every trial runs its full length: a learning rate
    half as large moves the loss beyond the floor only after a few steps."""
    workdir = tmp_path_factory.mktemp("project")
    for name in ("ds_train.py", "ds_config.json"):
        shutil.copy(SCRIPTS / name, workdir / name)
    (workdir / "space.yaml").write_text(SPACE)
    results = workdir / "results"
    done = autotune(
        "run", "--cluster", "local:2", "--space", "space.yaml", "--sampler", "grid",
        "--trials", "4", "--no-confirm", "--results", str(results), "--study", "s",
        "--precision", "0", "--no-early-stop",  # every trial its 8 measured steps
        "--", "ds_train.py", "--deepspeed_config", "ds_config.json", "--lr-per-sample", "5e-3",
        cwd=workdir, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, results / "s"


def trials_of(folder: Path) -> list[dict[str, Any]]:
    listed = autotune(
        "trials", "--study", "s", "--results", str(folder.parent), "--format", "json"
    )
    assert listed.returncode == 0, listed.stderr
    return cast(list[dict[str, Any]], json.loads(listed.stdout))


@pytest.mark.slow
def test_a_script_whose_lr_follows_the_micro_batch_is_flagged_and_not_exported(
    lr_follows_mbs: tuple[str, Path],
) -> None:
    out, folder = lr_follows_mbs
    rows = trials_of(folder)
    assert {row["mbs"] for row in rows} == {4, 8}
    assert {row["kind"] for row in rows if row["mbs"] == 4} == {parity.DIFFERS}
    best = yaml.safe_load((folder / "best" / "best.yaml").read_text())
    assert best["config"]["mbs"] == 8  # the user's micro-batch: their learning rate
    assert "trains another model than your config: mbs 8->4 moves the loss" in out


@pytest.mark.slow
def test_a_zero_stage_change_trains_the_same_model(lr_follows_mbs: tuple[str, Path]) -> None:
    out, folder = lr_follows_mbs
    rows = trials_of(folder)
    zero3 = [row for row in rows if (row["zero"], row["mbs"]) == (3, 8)]
    assert [row["kind"] for row in zero3] == ["ok"]
    assert "parity: " in out


@pytest.mark.slow
def test_best_yaml_records_the_parity_of_what_it_exports(lr_follows_mbs: tuple[str, Path]) -> None:
    _, folder = lr_follows_mbs
    block = yaml.safe_load((folder / "best" / "best.yaml").read_text())["parity"]
    assert block["verdict"] == "same"
    assert block["steps_compared"] >= 3
    assert 0 <= block["largest_difference"] <= block["floor"]
    assert (block["floor"], block["floor_from"]) == (0.005, "precision")
