"""Fitting the model's free parameters to measured step times.

A coordinate search on a log grid minimises the squared log error of predicted step time:
a handful of parameters and at most a few hundred observations, so a plain search is cheap,
the more so as the observations of one workload, cluster and engine are predicted as one
table, whose step parts are computed once per fit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from autotune.estimate.calibration import Calibration
from autotune.estimate.commfit import CollectiveFit
from autotune.estimate.steptime import StepParts, step_parts
from autotune.estimate.traits import EngineTraits
from autotune.space import TrainConfig
from autotune.space.table import ConfigTable
from autotune.specs import Cluster, Workload

# bandwidth_scale stops at 1.25: NCCL's model is conservative (Tree measured up to ~1.2x its
# table, shared research §4 row 16), but a fabric cannot deliver much more than its links.
BOUNDS = {
    "compute_efficiency": (0.05, 0.95),
    "gemm_half_size": (1e2, 1e9),
    "bandwidth_scale": (0.05, 1.25),
    "overlap": (0.0, 1.0),
    "fp8_efficiency": (0.2, 1.0),
    "moe_expert_host_s": (0.0, 0.05),
    "ep_overlap": (0.0, 1.0),
}
GRIDS = {"moe_expert_host_s": tuple(1e-5 * 2 ** (k / 2) for k in range(24))}
"""Values tried before the coordinate search for a parameter that changes nothing until it
crosses a threshold (a host time below the GPU's time is hidden), from which small steps
would never leave its start."""


@dataclass(frozen=True)
class Observation:
    workload: Workload
    cluster: Cluster
    config: TrainConfig
    traits: EngineTraits
    step_time_s: float


@dataclass(frozen=True)
class _Batch:
    """Observations of one workload, cluster and engine: predicted as one table."""

    rows: list[int]
    parts: StepParts
    measured: np.ndarray


def _batches(data: Sequence[Observation], collectives: tuple[CollectiveFit, ...]) -> list[_Batch]:
    members: list[tuple[Observation, list[int]]] = []
    for i, o in enumerate(data):
        same = (o.workload, o.cluster, o.traits)
        group = next(
            (m for m in members if (m[0].workload, m[0].cluster, m[0].traits) == same), None
        )
        if group is None:
            members.append((o, [i]))
        else:
            group[1].append(i)
    batches = []
    for first, rows in members:
        table = ConfigTable.of([data[i].config for i in rows])
        o = first
        parts = step_parts(o.workload, table, o.cluster, o.traits, collectives)
        measured = np.array([data[i].step_time_s for i in rows])
        batches.append(_Batch(rows, parts, measured))
    return batches


def _errors(cal: Calibration, batches: list[_Batch], count: int) -> np.ndarray:
    errors = np.zeros(count)
    for b in batches:
        errors[b.rows] = np.log(b.parts.time(cal).total_s / b.measured)
    return errors


def log_errors(cal: Calibration, data: Sequence[Observation]) -> list[float]:
    """log(predicted / measured step time) of each observation."""
    return _errors(cal, _batches(data, cal.collectives), len(data)).tolist()


def median_abs_pct_error(cal: Calibration, data: Sequence[Observation]) -> float:
    return statistics.median(abs(math.exp(e) - 1) for e in log_errors(cal, data))


def fit(
    data: Sequence[Observation],
    start: Calibration,
    free: Sequence[str] = ("compute_efficiency", "gemm_half_size", "bandwidth_scale", "overlap"),
    rounds: int = 6,
) -> Calibration:
    """Least squared log error, one parameter at a time on shrinking multiplicative steps
    (after a grid for those in `GRIDS`)."""
    known = {f.name for f in fields(Calibration)}
    unknown = set(free) - known
    if unknown:
        raise ValueError(f"unknown calibration parameters {sorted(unknown)}")
    batches = _batches(data, start.collectives)

    def loss(cal: Calibration) -> float:
        return float(np.mean(_errors(cal, batches, len(data)) ** 2))

    best, best_loss = start, loss(start)
    for name in (n for n in free if n in GRIDS):
        for value in GRIDS[name]:
            grid_point: dict[str, Any] = {name: value}
            candidate = replace(best, **grid_point)
            candidate_loss = loss(candidate)
            if candidate_loss < best_loss:
                best, best_loss = candidate, candidate_loss
    step = 2.0
    for _ in range(rounds):
        for name in free:
            lo, hi = BOUNDS[name]
            for factor in (step, 1 / step, step**0.5, step**-0.5):
                value = getattr(best, name)
                candidate_value = min(hi, max(lo, (value or 0.05) * factor))
                changed: dict[str, Any] = {name: candidate_value}
                candidate = replace(best, **changed)
                candidate_loss = loss(candidate)
                if candidate_loss < best_loss:
                    best, best_loss = candidate, candidate_loss
        step = step**0.5
    return best


def rounded(cal: Calibration) -> Calibration:
    """A fit as the code states it: two decimals, the GEMM half size in whole rows, host
    times to a hundredth of a millisecond."""
    return replace(
        cal,
        compute_efficiency=round(cal.compute_efficiency, 2),
        gemm_half_size=float(round(cal.gemm_half_size)),
        bandwidth_scale=round(cal.bandwidth_scale, 2),
        overlap=round(cal.overlap, 2),
        fp8_efficiency=round(cal.fp8_efficiency, 2),
        moe_expert_host_s=round(cal.moe_expert_host_s, 5),
        ep_overlap=round(cal.ep_overlap, 2),
    )
