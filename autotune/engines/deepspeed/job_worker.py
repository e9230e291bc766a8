"""Runs the user's own DeepSpeed script as a trial, unmodified.

`autotune.rank` runs it on every rank. It wraps DeepSpeed's optimizer step
(`DeepSpeedEngine.step` at a gradient-accumulation boundary, `PipelineEngine.train_batch`) so
that a `job_hook.StepHook` sees each step, and its forward, whose first batch tells the model's
shape (`model_shape`), then runs the script with the trial's ds_config in place of the user's.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from deepspeed.runtime.engine import DeepSpeedEngine
from deepspeed.runtime.pipe.engine import PipelineEngine

from autotune.engines.deepspeed.worker import model_state
from autotune.rank import failures, harness
from autotune.rank.job_hook import StepHook, run_job
from autotune.rank.model_shape import read_shape, token_ids
from autotune.trial.spec import TrialSpec


def check_config(engine: DeepSpeedEngine, spec: TrialSpec) -> None:
    """The script must run with the config it was given, or no trial of it means anything."""
    running = {
        "mbs": engine.train_micro_batch_size_per_gpu(),
        "zero": engine.zero_optimization_stage(),
    }
    for knob, value in running.items():
        wanted = getattr(spec.config, knob)
        if value != wanted:
            raise failures.ConfigIgnoredError(
                f"the script runs with {knob}={value} but the trial's DeepSpeed config sets "
                f"{knob}={wanted}: it does not take its config from the file it was given"
            )


def install(hook: StepHook) -> None:
    """Wrap DeepSpeed's step entry points so that `hook` sees each optimizer step."""
    plain_step = DeepSpeedEngine.step
    plain_forward = DeepSpeedEngine.forward
    shape_looked_for: list[bool] = []
    pipeline_batch = PipelineEngine.train_batch

    def forward(engine: DeepSpeedEngine, *args: Any, **kwargs: Any) -> Any:
        if not shape_looked_for:  # once: the walk over the module must not time a step
            shape_looked_for.append(True)
            if (tokens := token_ids(args, kwargs)) is not None:
                hook.model_shape = read_shape(engine.module, tokens)
        return plain_forward(engine, *args, **kwargs)

    def after(engine: DeepSpeedEngine) -> None:
        hook.after_step(
            torch.device(engine.device),
            check=lambda: check_config(engine, hook.spec),
            states=lambda: model_state(engine),
        )

    def step(engine: DeepSpeedEngine, *args: Any, **kwargs: Any) -> Any:
        boundary = engine.is_gradient_accumulation_boundary()
        if boundary:
            hook.before_step(lambda: model_state(engine))
        done = plain_step(engine, *args, **kwargs)
        if boundary:
            after(engine)
        return done

    def train_batch(engine: PipelineEngine, *args: Any, **kwargs: Any) -> Any:
        loss = pipeline_batch(engine, *args, **kwargs)
        after(engine)
        return loss

    DeepSpeedEngine.step = step
    DeepSpeedEngine.forward = forward
    PipelineEngine.train_batch = train_batch


def preload() -> None:
    """What DeepSpeed loads in every trial on a CPU, loaded once in a forked pool's rank
    (rank/fork_pool.py): its op loader reads the CPU's flags and checks each op's
    build with ninja, about 3 s a trial here, where a loaded op is kept in the process; and
    ZeRO's optimizer check imports its Muon optimizer, whose torch.compile decorators import
    Inductor (1.3 s), as DeepSpeed does, only where it is installed. What fails here is left
    for the trial, as DeepSpeed would meet it there."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    with contextlib.suppress(ImportError):
        import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401
    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        return
    # init_distributed's shared-memory collectives; the accelerator's Adam
    for name in ("ShareMemCommBuilder", "FusedAdamBuilder"):
        builder = accelerator.create_op_builder(name)
        if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            continue
        with contextlib.suppress(Exception):
            builder.load(verbose=False)


def main(args: list[str], started: float) -> None:
    hook = StepHook(*harness.start(args, started))
    install(hook)
    run_job(hook)
