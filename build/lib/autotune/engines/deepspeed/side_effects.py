"""What a DeepSpeed script or a Hugging Face Trainer job does besides training, turned off in
its trials (the export keeps it as the user wrote it). Pure.

A trial's ds_config has DeepSpeed's monitors (`get_monitor_config` in
deepspeed/monitor/config.py: TensorBoard, W&B, CSV, Comet) and its flops profiler disabled.
A Trainer's trial command (transformers' `TrainingArguments`, every spelling `HfArgumentParser`
accepts) reports nowhere, neither evaluates nor saves, does not resume from a checkpoint or
push to the Hub, and writes into the trial's own folder, where no checkpoint can be found.
Logging stays: the step hook, not the Trainer's log, measures a trial.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.engines.argv import (
    OPTIONAL,
    VARIADIC,
    Flag,
    has_flag,
    hf_flag,
    with_flag,
    without_flags,
)

MONITORS = ("tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler")
"""ds_config sections that report outside the run (DeepSpeed's monitors) or profile one of
its steps (`flops_profiler`, at its `profile_step`): each is disabled in a trial where the
user's config has it."""

HF_OUTPUT = hf_flag("output_dir")
HF_REPORT = hf_flag("report_to")
HF_SAVE = hf_flag("save_strategy")
HF_EVAL = (*hf_flag("eval_strategy"), *hf_flag("evaluation_strategy"))
"""`evaluation_strategy`: its name before transformers 4.46, rewritten where a command gives
it (a newer Trainer refuses it, so it is never added)."""
HF_DROPPED = {
    **dict.fromkeys(hf_flag("resume_from_checkpoint"), 1),
    **dict.fromkeys(HF_REPORT, VARIADIC),  # one value from transformers 5, a list before
    **dict.fromkeys(hf_flag("push_to_hub"), OPTIONAL),
    **dict.fromkeys(hf_flag("eval_on_start"), OPTIONAL),
    **dict.fromkeys(hf_flag("load_best_model_at_end"), OPTIONAL),  # needs evaluation and saving
}
"""The Trainer's flags a trial leaves out (flag -> values it takes): their defaults are no
resume, no pushing, no evaluation before training; `--report_to none` is added."""
TRIAL_OUTPUT = "trainer_output"
"""The Trainer's output_dir in a trial, inside the trial's folder."""


def without_monitors(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with each of `MONITORS` it holds disabled, its other settings kept."""
    quiet = copy.deepcopy(config)
    for name in MONITORS:
        if isinstance(quiet.get(name), dict):
            quiet[name] = {**quiet[name], "enabled": False}
    return quiet


def _rewritten(argv: Sequence[str], flag: Flag, value: str) -> list[str]:
    """`flag` set to `value` where the command gives it (the last place, in its spelling)."""
    return with_flag(argv, flag, value) if has_flag(argv, flag) else list(argv)


def hf_trial_argv(argv: Sequence[str], trial_folder: Path) -> list[str]:
    """A Trainer command (its config and batch flags already the trial's) without the job's
    side effects: no reporting, saving, evaluation, resuming or pushing, its output in
    `trial_folder`."""
    out = without_flags(argv, HF_DROPPED)
    out = with_flag(out, HF_OUTPUT, str(trial_folder / TRIAL_OUTPUT))
    out = with_flag(out, HF_SAVE, "no")
    out = _rewritten(out, HF_EVAL, "no")
    return [*out, HF_REPORT[0], "none"]
