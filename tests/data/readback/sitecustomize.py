"""Reads back what DeepSpeed's engine holds, from inside any command a test runs (an exported
train.sh, through torchrun or SLURM): with this folder on PYTHONPATH and $READBACK_DIR set,
every torchrun rank writes `rank<N>.json` at its first optimizer step, before the step: the
engine's global batch, micro-batch, accumulation, ZeRO stage, precision and its optimizer's
settings. Python imports `sitecustomize` at start-up; torchrun's own agent (no RANK) is left
alone."""

import json
import os
from pathlib import Path


def _optimizer(engine):
    groups = engine.optimizer.param_groups
    first = groups[0]
    return {
        "lr": first.get("initial_lr", first["lr"]),  # before a scheduler's first change
        "betas": list(first["betas"]),
        "eps": first["eps"],
        "weight_decay": max(group["weight_decay"] for group in groups),
    }


def _held(engine):
    precision = "fp32"
    if engine.bfloat16_enabled():
        precision = "bf16"
    elif engine.fp16_enabled():
        precision = "fp16"
    return {
        "train_batch_size": engine.train_batch_size(),
        "mbs": engine.train_micro_batch_size_per_gpu(),
        "gradient_accumulation_steps": engine.gradient_accumulation_steps(),
        "zero": int(engine.zero_optimization_stage()),
        "precision": precision,
        "optimizer": _optimizer(engine),
        "world_size": engine.world_size,
    }


def _install(folder):
    from deepspeed.runtime.engine import DeepSpeedEngine

    plain_step = DeepSpeedEngine.step
    written = []

    def step(engine, *args, **kwargs):
        if not written and engine.is_gradient_accumulation_boundary():
            written.append(True)
            path = folder / f"rank{os.environ['RANK']}.json"
            path.write_text(json.dumps(_held(engine)))
        return plain_step(engine, *args, **kwargs)

    DeepSpeedEngine.step = step


if os.environ.get("READBACK_DIR") and "RANK" in os.environ:
    _install(Path(os.environ["READBACK_DIR"]))
