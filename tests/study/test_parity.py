"""Loss parity: a config whose loss curve leaves the user's config's by more than the
run-to-run floor trains another model; the summary says which knob and by how much."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any, cast

import optuna
import pytest
import yaml

from autotune.space import TrainConfig, config_key
from autotune.specs.loading import load_cluster, load_workload
from autotune.study.record.trial_attrs import ERROR, KIND, USERS_CONFIG, USERS_CONFIG_FROM
from autotune.study.verdict import parity
from autotune.study.verdict.parity_cause import differs_note, moves_text
from autotune.study.verdict.parity_verdict import study_parity
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


def alone(curve: tuple[float, ...] = CURVE, precision: str = "fp32") -> parity.Band:
    """The band of one run of the user's config: the precision floor at every step."""
    found = parity.band([parity.Run(curve, False)], precision)
    assert found is not None
    return found


def grown(share: float, steps: int = 17, seed: float = 1.0) -> tuple[float, ...]:
    """A long curve whose dropout draws came out otherwise: apart by nothing at the first
    step, then by a share that grows as the training's chaos amplifies it, to `share` at
    the last; `seed` flips its signs."""
    base = long_curve(steps)
    return tuple(
        v * (1 + share * math.exp(i - steps + 1) * seed * (-1) ** i) if i else v
        for i, v in enumerate(base)
    )


def long_curve(steps: int = 17) -> tuple[float, ...]:
    return tuple(6.4 - 0.05 * i for i in range(steps))


def test_a_learning_rate_that_follows_the_micro_batch_differs_and_says_where() -> None:
    found = parity.judge(drifted(0.03), alone())
    assert found is not None
    assert found.verdict == parity.DIFFERS
    assert (found.at_step, found.steps) == (8, 8)
    assert abs(found.largest - 0.03) < 1e-9
    assert (found.floor, found.floor_from) == (parity.PRECISION_FLOOR["fp32"], "precision")


def test_zero_stage_and_micro_batch_changes_are_the_same_model() -> None:
    assert parity.judge(CURVE, alone()).verdict == "same"  # type: ignore[union-attr]
    # a micro-batch regrouping dropout's draws: 0.16% a step on the test scripts
    assert parity.judge(jittered(0.0016), alone()).verdict == "same"  # type: ignore[union-attr]
    # a trial that ran fewer steps is compared over the steps both ran
    assert parity.judge(CURVE[:3], alone()).steps == 3  # type: ignore[union-attr]


def test_under_dropout_the_users_reseeded_run_sets_each_steps_floor() -> None:
    """With dropout a micro-batch change at a fixed global batch regroups dropout's draws:
    the Trainer's curves part by 0.04% until step 9, then 0.55% at step 11 and 4.7% at step
    17. The user's reseeded run drifts alike, so such a trial is the same training at any
    length, which a fixed floor of 0.5% called `differs`; a learning rate that follows the
    micro-batch still differs, in the early steps where the drift is small."""
    reseeded = grown(0.04)
    band = parity.band([parity.Run(long_curve(), False), parity.Run(reseeded, True)], "fp32")
    assert band is not None and (band.runs, band.reseeded) == (2, 1)
    safe = grown(0.047, seed=-1.0)  # another draw of the same drift, a little further
    assert parity.judge(safe, alone(long_curve())).verdict == parity.DIFFERS  # type: ignore[union-attr]
    found = parity.judge(safe, band)
    assert found is not None and found.verdict == "same" and found.steps == 17
    assert found.floor_from == "the drift of your config's 2 runs"
    # a learning rate twice the user's: 1% apart by step 3, where the runs drift 0.0002%
    lr = tuple(v * (1 + 0.005 * i) for i, v in enumerate(long_curve()))
    found = parity.judge(lr, band)
    assert found is not None and found.verdict == parity.DIFFERS
    left = next(step for step, loss in enumerate(lr, 1) if band.plan().over(step, loss))
    assert left == 3, "a trial given the band stops at the third step"
    # the floor never falls: a step where the runs happen to agree keeps the widest drift
    assert list(band.floor) == sorted(band.floor)


def test_a_loss_that_turns_nan_or_inf_is_never_the_same_model() -> None:
    for bad in (float("nan"), float("inf")):
        curve = (*CURVE[:4], bad, *CURVE[5:])
        found = parity.judge(curve, alone())
        assert found is not None and found.verdict == parity.DIFFERS
        assert found.at_step == 5
    # a user's run that diverged sets no floor: the precision floor stands
    diverged = (*CURVE[:4], float("nan"), *CURVE[5:])
    band = parity.band([parity.Run(CURVE, False), parity.Run(diverged, True)], "fp32")
    assert band is not None
    found = parity.judge(drifted(0.03), band)
    assert found is not None and found.verdict == parity.DIFFERS
    assert found.floor_from == "precision"


def test_no_loss_means_no_verdict() -> None:
    assert parity.judge((), alone()) is None
    assert parity.band([parity.Run((), False)], "fp32") is None


def study_with_users_config() -> tuple[optuna.Study, int]:
    study = new_study()
    study.set_user_attr(USERS_CONFIG, config_key(YOURS))
    study.set_user_attr(USERS_CONFIG_FROM, "your ds_config")
    workload = dataclasses.replace(load_workload("tiny"), precision="fp32")
    study.set_user_attr("workload", dataclasses.asdict(workload))
    study.set_user_attr("cluster", dataclasses.asdict(load_cluster("local:2")))
    study.set_user_attr("engine", "deepspeed")
    return study, add_measured(
        study, 1000.0, YOURS, losses=list(CURVE), config_key=config_key(YOURS), label=True
    )


def add_differing(study: optuna.Study, config: TrainConfig, curve: tuple[float, ...]) -> None:
    found = parity.judge(curve, alone())
    assert found is not None
    error = differs_note(found, moves_text(config, YOURS))
    attrs = measured_attrs(
        config,
        losses=list(curve),
        config_key=config_key(config),
        **{KIND: parity.DIFFERS, ERROR: error},
    )
    study.add_trial(
        optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs=attrs)
    )


def test_an_export_of_your_own_config_says_so_with_the_count_and_the_cause() -> None:
    """A fallback export once read `verdict: same, largest_difference: 0.0`, no count, no
    reason; and "your config is exported (the fastest)" where nothing else stood."""
    study, _ = study_with_users_config()
    add_differing(study, TrainConfig(dp=2, mbs=4), drifted(0.03))
    add_differing(study, TrainConfig(dp=2, mbs=2), drifted(0.05))
    verdict = study_parity(study, config_key(YOURS), "fp32")
    block = verdict.as_dict()
    assert block["verdict"] == "yours"
    assert block["why"] == "your own config is exported (no other config trains your model)"
    assert block["differing_trials"] == 2
    assert block["cause"].startswith("the micro-batch (mbs 8->2, 8->4): your script's")
    assert block["held_at_yours"] == {"mbs": 8}
    lines = verdict.lines()
    assert lines[0] == "parity: your own config is exported (no other config trains your model)"
    assert "2 trials train another model: the micro-batch (mbs 8->2, 8->4)" in lines[2]


def test_the_summary_says_same_with_the_largest_difference_and_the_floor() -> None:
    study, _ = study_with_users_config()
    zero3 = TrainConfig(dp=2, zero=3, mbs=8)
    add_measured(study, 2000.0, zero3, losses=list(jittered(0.001)), config_key=config_key(zero3))
    verdict = study_parity(study, config_key(zero3), "fp32")
    assert verdict.lines() == [
        "parity: same: the exported config's loss stays within 0.1% of yours over 8 steps "
        "(floor 0.5% at that step, from precision)",
        "  reference: dp=2,mbs=8, from your ds_config (1 run)",
    ]
    assert verdict.as_dict()["differing_trials"] == 0


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
    differing = [row for row in rows if row["mbs"] == 4]
    assert {row["kind"] for row in differing} == {parity.DIFFERS}
    # it stopped once its speed was measured, its loss already over the floor
    assert {row["stopped_for"] for row in differing} == {"differs"}
    best = yaml.safe_load((folder / "best" / "best.yaml").read_text())
    assert best["config"]["mbs"] == 8  # the user's micro-batch: their learning rate
    assert "train another model: the micro-batch (mbs 8->4): your script's learning" in out
    outcome = json.loads(
        (folder / "trials" / str(differing[0]["number"]) / "outcome.json").read_text()
    )
    assert outcome["kind"] == parity.DIFFERS


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
    assert block["verdict"] in ("same", "yours")
    assert block["why"]
    assert block["differing_trials"] >= 1
    assert block["cause"].startswith("the micro-batch (mbs 8->4)")
    assert block["reference_runs"] == 2  # the user's config and its reseeded run
    if block["verdict"] == "same":
        assert block["steps_compared"] >= 3
        assert 0 <= block["largest_difference"] <= block["floor"]


@pytest.mark.slow
def test_under_dropout_no_safe_config_differs_at_sixteen_measured_steps(tmp_path: Path) -> None:
    """A loop with dropout 0.1 (the parity benchmark's MLP under DDP) whose micro-batch and
    buckets move at a fixed global batch: every config trains the same model, at 16 measured
    steps, where a fixed 0.5% floor flagged them (dropout's draws, grouped otherwise, part
    the curves by more within a few steps)."""
    shutil.copytree(REPO / "scripts" / "parity_scripts", tmp_path, dirs_exist_ok=True)
    (tmp_path / "space.yaml").write_text(
        "engine: torch\nknobs:\n  mbs: [1, 2, 4, 8]\n  ddp_bucket_mb: [1, 25]\n"
        "yours:\n  mbs: 4\n  ddp_bucket_mb: 25\n"
    )
    done = autotune(
        "run", "--engine", "torch", "--cluster", "local:2", "--space", "space.yaml",
        "--trials", "5", "--no-confirm", "--measured-steps", "16", "--results", "res",
        "--study", "s", "--", "step_mlp.py", "--dropout", "0.1",
        cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = trials_of(tmp_path / "res" / "s")
    moved = [row for row in rows if row["mbs"] != 4]
    assert moved, "the study moved the micro-batch"
    assert all(row["kind"] == "ok" for row in rows), [(r["label"], r["kind"]) for r in rows]
    assert "from `yours:` in space.yaml (2 runs, 1 reseeded)" in done.stdout
