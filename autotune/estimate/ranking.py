"""The plan before any trial: configs predicted to fit, fastest first, and why each other one
cannot fit."""

from __future__ import annotations

from autotune.estimate.predict import Estimate, estimate
from autotune.estimate.steptime import Calibration
from autotune.problem import Problem
from autotune.space import TrainConfig, config_key


def memory_verdicts(
    problem: Problem, valid: tuple[TrainConfig, ...], cal: Calibration
) -> tuple[list[Estimate], dict[str, str]]:
    """Predictions of the configs that fit, best first; and why each other one cannot fit,
    by config key."""
    fitting, too_big = [], {}
    for config in valid:
        e = estimate(problem.workload, config, problem.cluster, problem.engine.name, cal)
        if e.fits:
            fitting.append(e)
        else:
            too_big[config_key(config)] = memory_reason(e, problem.cluster.device.memory_bytes)
    fitting.sort(key=lambda e: -e.tokens_per_s)
    return fitting, too_big


def memory_reason(e: Estimate, device_bytes: float) -> str:
    parts = ", ".join(
        f"{k} {v / 2**30:.1f}" for k, v in e.memory.as_dict().items() if k != "total" and v
    )
    return (
        f"predicted not to fit: {e.memory.total / 2**30:.1f} GiB per rank > "
        f"{device_bytes / 2**30:.1f} GiB ({parts} GiB)"
    )
