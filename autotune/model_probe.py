"""The model of a DeepSpeed job tuned without `--model`: one short run of the user's own
config, whose hook reads the model's shape from the module their script trains, so that the
estimator plans for their model rather than a stand-in."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from autotune.engines.model_shape import ModelShape
from autotune.engines.user_job import ds_precision
from autotune.errors import InputError, LaunchError
from autotune.launchers import Launcher
from autotune.problem import Problem
from autotune.trial import folder as trials
from autotune.trial.spec import StepPlan

PROBE_STEPS = StepPlan(
    min_warmup=1, max_warmup=1, settle_window=1, min_measured=1, measured_steps=1, profile=False
)
"""Three optimizer steps: the first (the hook's start), one of warm-up, one timed."""


def read_model(
    problem: Problem, launcher: Launcher, folder: Path, timeout_s: float
) -> tuple[Problem, ModelShape]:
    """`problem` with the workload read from the user's script (a run in `folder`)."""
    assert problem.job is not None
    config = problem.users_config() or problem.enumerate().require_some().valid[0]
    folder.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=folder))  # workers of one study each
    spec = problem.trial_spec(config, PROBE_STEPS)
    record = trials.run(spec, problem.engine, launcher, folder, timeout_s)
    if record.kind != "ok" or record.result is None:
        raise LaunchError(
            f"the script failed before any config was measured ({record.kind}), in the run "
            f"that reads its model: {record.error} (files: {folder}; --model skips this run)"
        )
    if record.result.model_shape is None:
        raise InputError(
            "your script's model has no embedding autotune can read, or its forward takes no "
            "token ids: describe it with --model (a preset or a YAML file)"
        )
    shape = ModelShape(**record.result.model_shape)
    workload = shape.workload(
        problem.job.name, problem.workload.global_batch_size, ds_precision(problem.job)
    )
    return dataclasses.replace(problem, workload=workload, reads_model=False), shape
