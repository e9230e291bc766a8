"""The plan before any trial: configs predicted to fit, fastest first, and how many cannot fit.
Memory is predicted for every valid config as one table, step time only for those that fit,
in chunks; an `Estimate` is made only for a config looked at."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from autotune.estimate.calibration import Calibration
from autotune.estimate.memory import fits, memory_breakdown
from autotune.estimate.predict import Estimate, Predictor, predict
from autotune.estimate.stages import Stages
from autotune.estimate.traits import EngineTraits
from autotune.space import TrainConfig
from autotune.space.table import ConfigTable
from autotune.specs import Cluster, Workload
from autotune.specs.cluster import DeviceKind

CHUNK = 1 << 18
"""Configs whose step time is predicted at once: what bounds a plan's memory (the model's
parts of a million configs would take gigabytes), not what it finds."""


@dataclass(frozen=True)
class Ranked(Sequence[Estimate]):
    """The configs predicted to fit, fastest first (equals in the order given); `too_big`
    counts the valid configs predicted not to fit. A config's `Estimate` is predicted again
    when looked at (the rows looked at together, as one table), as ranking keeps only each
    config's throughput."""

    workload: Workload
    cluster: Cluster
    traits: EngineTraits
    cal: Calibration
    table: ConfigTable
    """The configs that fit, in the order given (not ranked)."""
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
            return list(self._estimates(self.order[i]))
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return next(self._estimates(self.order[i : i + 1 or None]))

    def __iter__(self) -> Iterator[Estimate]:
        return self._estimates(self.order)

    def _estimates(self, rows: np.ndarray) -> Iterator[Estimate]:
        """These rows' estimates, predicted CHUNK at a time."""
        for start in range(0, len(rows), CHUNK):
            chunk = self.table.take(rows[start : start + CHUNK])
            found = predict(self.workload, chunk, self.cluster, self.traits, self.cal)
            yield from (found.row(k) for k in range(len(chunk)))

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


def memory_verdicts(
    w: Workload,
    cluster: Cluster,
    traits: EngineTraits,
    valid: Sequence[TrainConfig],
    cal: Calibration,
) -> Ranked:
    """The configs that fit, best first."""
    table = ConfigTable.of(valid)
    # No NCCL setting changes memory: it is computed once per run of a layout's variants.
    runs = table.nccl_runs()
    stages = Stages.of(w, runs.layouts, traits)
    memory = memory_breakdown(w, runs.layouts, traits, cluster.device.generation, stages)
    fitting = np.flatnonzero(runs.spread(fits(memory, cluster.device)))
    rate = np.empty(len(fitting))
    for start in range(0, len(fitting), CHUNK):
        rows = fitting[start : start + CHUNK]
        chunk_runs, which = runs.take(rows)
        chunk = chunk_runs.layouts if chunk_runs.of_row is None else table.take(rows)
        known = memory.take(chunk_runs.spread(which)), chunk_runs, stages.take(which)
        model = Predictor.of(w, chunk, cluster, traits, cal.collectives, *known)
        rate[start : start + len(rows)] = model.at(cal).tokens_per_s
    fastest = np.argsort(-rate, kind="stable")
    too_big = len(table) - len(fitting)
    return Ranked(w, cluster, traits, cal, table.take(fitting), fastest, too_big)


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
