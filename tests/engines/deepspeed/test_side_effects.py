"""A DeepSpeed or Trainer job's side effects: off in its trials, as the user wrote them in its
export. The Trainer's commands are read by transformers' own `HfArgumentParser`, the ds_configs
by DeepSpeed's own monitor config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.engines import get_framework
from autotune.engines.command import parse_job
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec

SIDE_EFFECTS = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
    "zero_optimization": {"stage": 2},
    "tensorboard": {"enabled": True, "output_path": "tb/", "job_name": "mine"},
    "wandb": {"enabled": True, "project": "mine"},
    "csv_monitor": {"enabled": True, "output_path": "csv/"},
    "comet": {"enabled": True, "project": "mine"},
    "flops_profiler": {"enabled": True, "profile_step": 2},
}
"""A ds_config that reports to every monitor DeepSpeed has and profiles a step."""
REPORTING = ["--report-to", "wandb", "--push_to_hub", "--eval_on_start", "--logging_steps", "1"]
EVALUATING = ["--eval-strategy=steps", "--eval_steps", "10", "--load_best_model_at_end", "true"]
SAVING = ["--save_strategy", "steps", "--save_steps", "10", "--resume-from-checkpoint", "out/c"]
TRAINER = ["--output-dir=out", *REPORTING, *EVALUATING, *SAVING, "--use_cpu"]
"""A Trainer command with every side effect, in a mix of HfArgumentParser's spellings."""


def spec_for(command: list[str], workdir: Path) -> TrialSpec:
    (workdir / "ds.json").write_text(json.dumps(SIDE_EFFECTS))
    (workdir / "train.py").write_text("")
    job = parse_job(command, workdir, "deepspeed")
    return TrialSpec(
        engine="deepspeed",
        workload=dataclasses.replace(load_workload("tiny"), global_batch_size=16),
        cluster=load_cluster("local:2"),
        config=TrainConfig(dp=2, zero=3, mbs=4),
        job=job,
    )


def training_arguments(argv: list[str]) -> Any:
    transformers = pytest.importorskip("transformers")
    parser = transformers.HfArgumentParser(transformers.TrainingArguments)
    (parsed,) = parser.parse_args_into_dataclasses(argv[1:])
    return parsed


def test_a_trainer_trial_reports_evaluates_saves_and_resumes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(["train.py", *TRAINER, "--deepspeed", "ds.json"], tmp_path)
    monkeypatch.chdir(tmp_path)  # the Trainer reads its ds_config as it parses
    framework = get_framework("huggingface")
    (tmp_path / "t").mkdir()
    (config,) = framework.write_trial_files(spec, tmp_path / "t")
    trial = training_arguments(framework.trial_argv(spec, str(config)))
    assert trial.report_to == [] and not trial.push_to_hub  # `none`, the Trainer's reading
    assert (trial.eval_strategy, trial.save_strategy) == ("no", "no")
    assert not trial.eval_on_start and not trial.load_best_model_at_end
    assert trial.resume_from_checkpoint is None
    assert trial.output_dir == str(tmp_path / "t" / "trainer_output")  # no checkpoint there
    assert (trial.per_device_train_batch_size, trial.gradient_accumulation_steps) == (4, 2)
    assert trial.logging_steps == 1 and trial.use_cpu  # what the trial does not change
    export = training_arguments(framework.export_argv(spec, "ds.json"))
    assert export.report_to == ["wandb"] and export.push_to_hub and export.eval_on_start
    assert (export.eval_strategy, export.save_strategy) == ("steps", "steps")
    assert export.load_best_model_at_end and export.resume_from_checkpoint == "out/c"
    assert export.output_dir == "out"
    assert (export.per_device_train_batch_size, export.gradient_accumulation_steps) == (4, 2)


@pytest.mark.parametrize(
    "flags",
    [
        ["--evaluation_strategy", "steps"],  # before transformers 4.46
        ["--evaluation-strategy=epoch"],
        ["--report_to", "wandb", "tensorboard", "--evaluation_strategy", "epoch"],  # a list
    ],
)
def test_a_trainer_trial_rewrites_each_spelling_where_it_stands(
    flags: list[str], tmp_path: Path
) -> None:
    """Older Trainers: `evaluation_strategy`, and `report_to` as a list (nargs='+')."""
    spec = spec_for(["train.py", *flags, "--deepspeed", "ds.json"], tmp_path)
    argv = get_framework("huggingface").trial_argv(spec, str(tmp_path / "t" / "ds.json"))
    strategy = next(a for a in argv if a.partition("=")[0].startswith("--evaluation"))
    position = argv.index(strategy)
    assert "=no" in strategy or argv[position + 1] == "no"
    assert argv[-2:] == ["--report_to", "none"]
    assert "wandb" not in argv and "tensorboard" not in argv
    assert not any(a.startswith("--eval_strategy") for a in argv)  # never added


@pytest.mark.parametrize("name", ["deepspeed", "huggingface"])
def test_a_trial_ds_config_has_deepspeeds_monitors_off_and_the_export_keeps_them(
    name: str, tmp_path: Path
) -> None:
    from deepspeed.monitor.config import get_monitor_config

    flag = "--deepspeed_config" if name == "deepspeed" else "--deepspeed"
    spec = spec_for(["train.py", flag, "ds.json"], tmp_path)
    framework = get_framework(name)
    (tmp_path / "trial").mkdir()
    (trial,) = framework.write_trial_files(spec, tmp_path / "trial")
    (export,) = framework.write_files(spec, tmp_path)
    tried, exported = (json.loads(path.read_text()) for path in (trial, export))
    assert not get_monitor_config(tried).enabled  # DeepSpeed starts no monitor
    assert not tried["flops_profiler"]["enabled"]
    assert tried["wandb"] == {"enabled": False, "project": "mine"}  # the rest as written
    assert get_monitor_config(exported).enabled
    for section in ("tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler"):
        assert exported[section] == SIDE_EFFECTS[section]
    assert {k: v for k, v in tried.items() if k not in SIDE_EFFECTS} == {
        k: v for k, v in exported.items() if k not in SIDE_EFFECTS
    }
