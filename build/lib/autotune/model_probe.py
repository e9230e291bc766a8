"""The model of a DeepSpeed job tuned without `--model`: a run of the user's own config, whose
hook reads the model's shape from the module their script trains, so that the estimator
plans for their model rather than a stand-in. In a new study the run measures the config in
full, as its first trial would, and the study takes it as that trial instead of launching it
again; otherwise (a resumed study, a command whose config autotune cannot read) a few steps
do."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autotune import runner as trials
from autotune.engines.deepspeed.jobs import ds_precision, with_users_values
from autotune.errors import InputError, LaunchError
from autotune.launchers import Launcher
from autotune.problem import Problem
from autotune.rank.model_shape import ModelShape
from autotune.space import TrainConfig
from autotune.specs.throughput import throughput
from autotune.trial.spec import TRIAL_FILE, StepPlan

PROBE_STEPS = StepPlan(
    min_warmup=1, max_warmup=1, settle_window=1, min_measured=1, measured_steps=1, profile=False
)
"""Three optimizer steps: the first (the hook's start), one of warm-up, one timed."""


@dataclass(frozen=True)
class ModelRead:
    """The problem planned for the user's model, and the run that read it: a measured trial
    of `config` (its figures counted for the model read), which the study may take as the
    trial of that config."""

    problem: Problem
    shape: ModelShape
    config: TrainConfig
    record: trials.TrialRecord | None
    """None when the run was a short one, not a trial."""


def read_model(
    problem: Problem, launcher: Launcher, folder: Path, steps: StepPlan, timeout_s: float
) -> ModelRead:
    """`problem` with the workload read from the user's script, by a run in `folder`: with
    `steps` when the study is new (no `trials/` beside `folder`) and the command's own config
    is known without the model (its values in the space), else `PROBE_STEPS`."""
    assert problem.job is not None
    users = problem.users_config()
    config = users or problem.enumerate().require_some().valid[0]
    known = users is not None and all(
        getattr(users, knob) in values for knob, values in problem.space.values.items()
    )
    if not known or (folder.parent / "trials").exists():
        steps = PROBE_STEPS
    folder.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=folder))  # workers of one study each
    spec = problem.trial_spec(config, steps)
    try:
        record = trials.run(spec, problem.engine, launcher, folder, timeout_s)
    except BaseException:  # stopped (Ctrl-C, SIGTERM): nothing of the run is kept
        shutil.rmtree(folder, ignore_errors=True)
        raise
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
    problem = _with_users_config(
        dataclasses.replace(problem, workload=workload, reads_model=False)
    )
    if steps == PROBE_STEPS or problem.users_config() != config:
        return ModelRead(problem, shape, config, None)
    # The run's tokens/s and FLOP/s counted for the model it read, and its trial file too.
    rate = throughput(workload, problem.cluster, record.result.step_time_s)
    result = dataclasses.replace(record.result, **dataclasses.asdict(rate))
    (folder / TRIAL_FILE).write_text(problem.trial_spec(config, steps).to_json())
    result.write(folder)
    record = dataclasses.replace(record, result=result)
    trials.write_outcome(record)
    return ModelRead(problem, shape, config, record)


def _with_users_config(problem: Problem) -> Problem:
    """`problem`, its model read, with the user's own values for that model among the space's
    (the Trainer's "auto" bucket is the model's width squared), so that the study measures
    the user's config first; a run of a config that is not the user's is no trial of it."""
    assert problem.job is not None and problem.framework is not None
    users = problem.framework.users_knobs(
        problem.job, problem.workload, problem.cluster.world_size
    )
    if not users:
        return problem
    return dataclasses.replace(problem, space=with_users_values(problem.space, users))
