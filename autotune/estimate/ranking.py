"""The plan before any trial: configs predicted to fit, fastest first, and how many cannot fit.
Memory is predicted for every valid config as one table, step time only for those that fit;
an `Estimate` is made only for a config looked at."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from autotune.estimate.memory import fits, memory_breakdown
from autotune.estimate.predict import Estimate, Predictions, Predictor
from autotune.estimate.stages import Stages
from autotune.estimate.steptime import Calibration
from autotune.problem import Problem
from autotune.space import TrainConfig
from autotune.space.table import ConfigTable
from autotune.specs.cluster import DeviceKind


@dataclass(frozen=True)
class Ranked(Sequence[Estimate]):
    """The configs predicted to fit, fastest first (equals in the order given); `too_big`
    counts the valid configs predicted not to fit."""

    predictions: Predictions
    """Of the configs that fit, in the order given."""
    order: np.ndarray
    too_big: int

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, i: int) -> Estimate: ...
    @overload
    def __getitem__(self, i: slice) -> list[Estimate]: ...
    def __getitem__(self, i: int | slice) -> Estimate | list[Estimate]:
        if isinstance(i, slice):
            return [self.predictions.row(int(r)) for r in self.order[i]]
        return self.predictions.row(int(self.order[i]))

    @property
    def table(self) -> ConfigTable:
        """The configs that fit, in the order given (not ranked)."""
        return self.predictions.table

    @property
    def fastest_first(self) -> ConfigTable:
        return self.table.take(self.order)

    @property
    def configs(self) -> list[TrainConfig]:
        """The configs that fit, fastest first."""
        made = self.table.configs
        return [made[r] for r in self.order]

    def in_given_order(self) -> Iterator[TrainConfig]:
        """The configs that fit in the order given, each made when reached."""
        return (self.table.config(r) for r in range(len(self.table)))


def memory_verdicts(problem: Problem, valid: Sequence[TrainConfig], cal: Calibration) -> Ranked:
    """Predictions of the configs that fit, best first."""
    w, cluster, engine = problem.workload, problem.cluster, problem.engine.name
    table = ConfigTable.of(valid)
    # No NCCL setting changes memory: it is computed once per run of a layout's variants.
    runs = table.nccl_runs()
    stages = Stages.of(w, runs.layouts, engine)
    memory = memory_breakdown(w, runs.layouts, engine, cluster.device.generation, stages)
    fitting = np.flatnonzero(runs.spread(fits(memory, cluster.device)))
    kept_runs, which = runs.take(fitting)
    kept = kept_runs.layouts if kept_runs.of_row is None else table.take(fitting)
    known = memory.take(kept_runs.spread(which)), kept_runs, stages.take(which)
    p = Predictor.of(w, kept, cluster, engine, cal.collectives, *known).at(cal)
    fastest = np.argsort(-p.tokens_per_s, kind="stable")
    return Ranked(p, fastest, len(table) - len(fitting))


def memory_reason(e: Estimate, device: DeviceKind) -> str:
    if e.memory.total <= device.memory_bytes:  # the host's limit, then
        return (
            f"predicted not to fit: {e.memory.offloaded / 2**30:.1f} GiB offloaded per rank > "
            f"{device.host_memory_bytes / 2**30:.1f} GiB of host memory per device (a "
            "cluster file's device sets host_memory_gib)"
        )
    device_bytes = device.memory_bytes
    parts = ", ".join(
        f"{k} {v / 2**30:.1f}"
        for k, v in e.memory.as_dict().items()
        if k not in ("total", "offloaded") and v
    )
    return (
        f"predicted not to fit: {e.memory.total / 2**30:.1f} GiB per rank > "
        f"{device_bytes / 2**30:.1f} GiB ({parts} GiB)"
    )
