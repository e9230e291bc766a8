"""With Hugging Face's documented ZeRO-2 and ZeRO-3 config files, used as a new user would
(`--deepspeed ds_config.json`, "auto" values, no space file): the user's config, as the
Trainer fills it, is the study's first trial, and the summary compares the winner with it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.cli.summary import study_summary
from autotune.launchers.base import LaunchOutcome, LaunchRequest
from autotune.model_probe import read_model
from autotune.problem import Problem, load_problem
from autotune.specs import load_workload
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef, study_ref
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.study.settings import Budget, SearchSettings
from autotune.trial.spec import StepPlan
from tests.cli.test_display import printed
from tests.fakes import Quiet, new_study
from tests.study.test_study_trial_length import CAL, RecordsPlans

TINY = load_workload("tiny")
AUTO_HALVES = {
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "bf16": {"enabled": "auto"},
}
AUTO_TRAINING = {
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    },
    "scheduler": {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"},
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
}
ZERO2 = {
    "stage": 2,
    "offload_optimizer": {"device": "cpu", "pin_memory": True},
    "allgather_partitions": True,
    "allgather_bucket_size": 2e8,
    "overlap_comm": True,
    "reduce_scatter": True,
    "reduce_bucket_size": 2e8,
    "contiguous_gradients": True,
}
ZERO3 = {
    "stage": 3,
    "offload_optimizer": {"device": "cpu", "pin_memory": True},
    "offload_param": {"device": "cpu", "pin_memory": True},
    "overlap_comm": True,
    "contiguous_gradients": True,
    "sub_group_size": 1e9,
    "reduce_bucket_size": "auto",
    "stage3_prefetch_bucket_size": "auto",
    "stage3_param_persistence_threshold": "auto",
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": True,
}
DOCUMENTED = {
    "zero2": {**AUTO_HALVES, **AUTO_TRAINING, "zero_optimization": ZERO2},
    "zero3": {**AUTO_HALVES, **AUTO_TRAINING, "zero_optimization": ZERO3},
}
"""Hugging Face's ZeRO-2 and ZeRO-3 config files, as its DeepSpeed integration guide gives
them ("ZeRO-2 config", "ZeRO-3 config")."""
USERS = {
    "zero2": {"zero": 2, "reduce_bucket": 200_000_000, "allgather_bucket": 200_000_000},
    "zero3": {"zero": 3, "reduce_bucket": TINY.hidden_size**2, "offload_param": True},
}
"""What the Trainer runs with each, beside the micro-batch of 4, overlap and CPU offload
("auto" reduce_bucket_size: the model's width squared)."""


WIDTH = 128
"""The width of the model the fake run reads, not the stand-in's."""


class ReadsTheModel(RecordsPlans):
    """A measured cluster whose runs report a model of width `WIDTH`, as the step hook reads
    a user's script's module."""

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        done = super().run(request)
        assert done.result is not None
        shape = {"parameters": 500_000, "vocab_size": 512, "hidden_size": WIDTH}
        shape |= {"seq_length": 64, "tied_embeddings": True}
        result = dataclasses.replace(done.result, model_shape=shape)
        result.write(request.folder)
        return dataclasses.replace(done, result=result)


def hf_problem(
    name: str, workdir: Path, monkeypatch: pytest.MonkeyPatch, model: str = "tiny"
) -> Problem:
    """The study's problem for the documented file, as `autotune run -- ...` loads it
    (`model`: its --model; "tiny", none given, is a stand-in until a run reads the model)."""
    (workdir / "train.py").write_text("")
    (workdir / "ds_config.json").write_text(json.dumps(DOCUMENTED[name]))
    monkeypatch.chdir(workdir)
    command = ["train.py", "--output_dir", "out", "--per-device-train-batch-size", "4"]
    return load_problem(
        "deepspeed", model, "local:2", command=[*command, "--deepspeed", "ds_config.json"]
    )


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_hugging_faces_documented_config_is_the_studys_baseline(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(dataclasses.asdict(TINY)))
    problem = hf_problem(name, tmp_path, monkeypatch, model="model.yaml")
    users = problem.users_config()
    assert users is not None and users in problem.enumerate().valid
    wanted: dict[str, Any] = {"mbs": 4, "overlap_comm": True, "offload_optimizer": True}
    assert {k: getattr(users, k) for k in {**wanted, **USERS[name]}} == {**wanted, **USERS[name]}
    study = new_study()
    run_study(
        problem,
        study,
        ref=StudyRef("t", "memory", tmp_path),
        launcher=RecordsPlans(),
        progress=Quiet(),
        settings=SearchSettings(budget=Budget(trials=3, confirm=False), calibration=CAL),
    )
    first = min(study.get_trials(), key=lambda trial: trial.number)
    assert TrialAttrs.of(first).config == users  # measured first, as the Trainer runs it
    summary = printed(160, study_summary, study, study_ref("t", None, tmp_path), [])
    assert "x your own config (" in summary and "trial 0:" in summary


def test_the_users_auto_bucket_follows_the_model_their_script_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --model, as a new user runs it: the run that reads the model is no trial of a
    config the Trainer would not run (its "auto" bucket from a stand-in's width); the study
    then measures the user's config for the model read first and compares the winner."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    problem = hf_problem("zero3", tmp_path, monkeypatch)
    assert problem.reads_model and TINY.hidden_size**2 not in problem.space.values["reduce_bucket"]
    launcher = ReadsTheModel()
    read = read_model(problem, launcher, tmp_path / "model_probe", StepPlan(), 60)
    assert read.record is None  # three steps, no trial
    users = read.problem.users_config()
    assert users is not None and users.reduce_bucket == WIDTH**2
    assert WIDTH**2 in read.problem.space.values["reduce_bucket"]
    study = new_study()
    run_study(
        read.problem,
        study,
        ref=StudyRef("t", "memory", tmp_path),
        launcher=launcher,
        progress=Quiet(),
        settings=SearchSettings(budget=Budget(trials=2, confirm=False), calibration=CAL),
    )
    first = min(study.get_trials(), key=lambda trial: trial.number)
    assert TrialAttrs.of(first).config == users
    summary = printed(160, study_summary, study, study_ref("t", None, tmp_path), [])
    assert "x your own config (" in summary
