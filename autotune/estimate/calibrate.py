"""Fitting the model's free parameters to measured step times.

A coordinate search on a log grid minimises the squared log error of predicted step time:
four parameters and at most a few hundred observations, so this takes well under a second
and needs nothing beyond the standard library.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from autotune.estimate.steptime import Calibration, step_time
from autotune.space import TrainConfig
from autotune.specs import Cluster, Workload

# bandwidth_scale stops at 1.25: NCCL's model is conservative (Tree measured up to ~1.2x its
# table, shared research §4 row 16), but a fabric cannot deliver much more than its links.
BOUNDS = {
    "compute_efficiency": (0.05, 0.95),
    "gemm_half_size": (1e2, 1e9),
    "bandwidth_scale": (0.05, 1.25),
    "overlap": (0.0, 1.0),
}


@dataclass(frozen=True)
class Observation:
    workload: Workload
    cluster: Cluster
    config: TrainConfig
    engine: str
    step_time_s: float


def log_errors(cal: Calibration, data: Sequence[Observation]) -> list[float]:
    return [
        math.log(step_time(o.workload, o.config, o.cluster, o.engine, cal).total_s / o.step_time_s)
        for o in data
    ]


def median_abs_pct_error(cal: Calibration, data: Sequence[Observation]) -> float:
    return statistics.median(abs(math.exp(e) - 1) for e in log_errors(cal, data))


def _loss(cal: Calibration, data: Sequence[Observation]) -> float:
    return sum(e * e for e in log_errors(cal, data)) / len(data)


def fit(
    data: Sequence[Observation],
    start: Calibration,
    free: Sequence[str] = ("compute_efficiency", "gemm_half_size", "bandwidth_scale", "overlap"),
    rounds: int = 6,
) -> Calibration:
    """Least squared log error, one parameter at a time on shrinking multiplicative steps."""
    known = {f.name for f in fields(Calibration)}
    unknown = set(free) - known
    if unknown:
        raise ValueError(f"unknown calibration parameters {sorted(unknown)}")
    best, best_loss = start, _loss(start, data)
    step = 2.0
    for _ in range(rounds):
        for name in free:
            lo, hi = BOUNDS[name]
            for factor in (step, 1 / step, step**0.5, step**-0.5):
                value = getattr(best, name)
                candidate_value = min(hi, max(lo, (value or 0.05) * factor))
                changed: dict[str, Any] = {name: candidate_value}
                candidate = replace(best, **changed)
                loss = _loss(candidate, data)
                if loss < best_loss:
                    best, best_loss = candidate, loss
        step = step**0.5
    return best
