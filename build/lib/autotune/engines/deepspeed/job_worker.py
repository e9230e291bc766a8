"""Runs the user's own DeepSpeed script as a trial, unmodified.

`autotune.rank` runs it on every rank. It wraps DeepSpeed's optimizer step
(`DeepSpeedEngine.step` at a gradient-accumulation boundary, `PipelineEngine.train_batch`) so
that a `job_hook.StepHook` sees each step; its backward, whose losses make the step's loss
(`rank/loss.py`; the Trainer's too, which runs DeepSpeed's backward); and its forward, whose
first batch tells the model's shape (`model_shape`), then runs the script with the trial's
ds_config in place of the user's.
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


def _on_cpu(section: object) -> bool:
    """An offload section of DeepSpeed's zero config (`DeepSpeedZeroOffloadOptimizerConfig`,
    `DeepSpeedZeroOffloadParamConfig`; None when absent) that sends states to the CPU, as
    `DeepSpeedEngine.zero_cpu_offload` reads it (NVMe is not CPU offload)."""
    device = getattr(section, "device", None)
    return getattr(device, "value", device) == "cpu"


def running_config(engine: Any) -> dict[str, object]:
    """What the DeepSpeed engine holds after `deepspeed.initialize` (runtime/engine.py:
    `train_batch_size`, `gradient_accumulation_steps`, ...; the ZeRO settings from its
    `_config.zero_config`, a `DeepSpeedZeroConfig`), by autotune's knob names."""
    zero = engine._config.zero_config
    return {
        "mbs": engine.train_micro_batch_size_per_gpu(),
        "zero": int(engine.zero_optimization_stage()),
        "train_batch_size": engine.train_batch_size(),
        "gradient_accumulation_steps": engine.gradient_accumulation_steps(),
        "reduce_bucket": int(zero.reduce_bucket_size),
        "allgather_bucket": int(zero.allgather_bucket_size),
        "overlap_comm": bool(zero.overlap_comm),
        "offload_optimizer": _on_cpu(zero.offload_optimizer),
        "offload_param": _on_cpu(zero.offload_param),
    }


def trials_config(spec: TrialSpec) -> dict[str, object]:
    """What the trial's ds_config (`jobs.trial_ds_config`) makes DeepSpeed hold, by the same
    names as `running_config`: the allgather bucket only at ZeRO 1 and 2, where it is
    written."""
    c, batch = spec.config, spec.workload.global_batch_size
    wanted: dict[str, object] = {
        "mbs": c.mbs,
        "zero": c.zero,
        "train_batch_size": batch,
        "gradient_accumulation_steps": c.grad_accum(batch),
        "reduce_bucket": c.reduce_bucket,
        "allgather_bucket": c.allgather_bucket,
        "overlap_comm": c.overlap_comm,
        "offload_optimizer": c.offload_optimizer,
        "offload_param": c.offload_param,
    }
    if c.zero not in (1, 2):
        del wanted["allgather_bucket"]
    return wanted


def ignored_knob(running: dict[str, object], spec: TrialSpec) -> str | None:
    """The first setting the running engine holds otherwise than the trial's ds_config sets
    it, told in one line; None when it runs the trial's config. Pure."""
    wanted = trials_config(spec)
    for knob, value in wanted.items():
        if knob not in running or running[knob] == value:
            continue
        line = (
            f"the script runs with {knob}={running[knob]} but the trial's DeepSpeed config "
            f"sets {knob}={value}"
        )
        if (
            knob == "gradient_accumulation_steps"
        ):  # DeepSpeed divides train_batch_size by its dp ranks
            line += (
                f" (train_batch_size={wanted['train_batch_size']} over "
                f"{spec.config.dp} data-parallel ranks: does the script's own model or "
                "pipeline parallelism take ranks from data parallelism?)"
            )
        return line
    return None


def ignored_batch(dims: tuple[int, ...] | None, mbs: int) -> str | None:
    """The first batch's token ids (`dims`: their first two sizes, batch-first or
    sequence-first) hold no dimension of the trial's micro-batch: the script's DataLoader
    batches otherwise than its engine, so its tokens/s would be wrong. Pure."""
    if dims is None or mbs in dims:
        return None
    return (
        f"the script's first batch of token ids has shape {list(dims)} but the trial's "
        f"DeepSpeed config sets a micro-batch of {mbs}: does its DataLoader take its batch "
        "size from somewhere else?"
    )


def check_config(
    engine: DeepSpeedEngine, spec: TrialSpec, batch_dims: tuple[int, ...] | None = None
) -> None:
    """The script must run with the config it was given, or no trial of it means anything:
    a knob its code overrides, or a first batch of another size than the micro-batch, fails
    the trial as config_ignored."""
    line = ignored_knob(running_config(engine), spec) or ignored_batch(batch_dims, spec.config.mbs)
    if line is not None:
        raise failures.ConfigIgnoredError(
            f"{line}: it does not take its config from the file it was given"
        )


def install(hook: StepHook) -> None:
    """Wrap DeepSpeed's step entry points so that `hook` sees each optimizer step."""
    plain_step = DeepSpeedEngine.step
    plain_forward = DeepSpeedEngine.forward
    plain_backward = DeepSpeedEngine.backward
    shape_looked_for: list[bool] = []
    first_batch: list[tuple[int, ...]] = []
    pipeline_batch = PipelineEngine.train_batch

    def forward(engine: DeepSpeedEngine, *args: Any, **kwargs: Any) -> Any:
        if not shape_looked_for:  # once: the walk over the module must not time a step
            shape_looked_for.append(True)
            if (tokens := token_ids(args, kwargs)) is not None:
                hook.model_shape = read_shape(engine.module, tokens)
                first_batch.append(tuple(int(d) for d in tokens.shape[:2]))
        return plain_forward(engine, *args, **kwargs)

    def backward(engine: DeepSpeedEngine, loss: Any, *args: Any, **kwargs: Any) -> Any:
        # scale_wrt_gas=False: the caller divided the loss by the accumulation (the Trainer)
        scaled = (args[1] if len(args) > 1 else kwargs.get("scale_wrt_gas", True)) is False
        hook.loss.add_micro(loss, summed=scaled)
        return plain_backward(engine, loss, *args, **kwargs)

    def after(engine: DeepSpeedEngine) -> None:
        hook.after_step(
            torch.device(engine.device),
            check=lambda: check_config(engine, hook.spec, next(iter(first_batch), None)),
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
        hook.loss.set_step(loss)  # averaged over its micro-batches and data-parallel ranks
        after(engine)
        return loss

    DeepSpeedEngine.step = step
    DeepSpeedEngine.forward = forward
    DeepSpeedEngine.backward = backward
    PipelineEngine.train_batch = train_batch


def preload() -> None:
    """What DeepSpeed loads in every trial on a CPU, loaded once in a forked pool's rank
    (rank/fork_pool.py): its op loader reads the CPU's flags and checks each op's
    build with ninja, seconds of every trial, where a loaded op is kept in the process; and
    ZeRO's optimizer check imports its Muon optimizer, whose torch.compile decorators import
    Inductor (slow), as DeepSpeed does, only where it is installed. What fails here is left
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
