"""Predictions for a table of configs at once, and for one config as a table of one: both
breakdowns and the figures a trial would measure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.estimate.calibration import Calibration, default_calibration
from autotune.estimate.commfit import CollectiveFit
from autotune.estimate.memory import MemoryBreakdown, fits, memory_breakdown
from autotune.estimate.stages import Stages
from autotune.estimate.steptime import StepParts, StepTime, step_parts
from autotune.estimate.traits import EngineTraits
from autotune.space import TrainConfig
from autotune.space.table import ConfigTable, NcclRuns
from autotune.specs import Cluster, Workload
from autotune.specs.throughput import throughput


@dataclass(frozen=True)
class Estimate:
    config: TrainConfig
    step: StepTime[float]
    memory: MemoryBreakdown[float]
    tokens_per_s: float
    tflops_per_device: float
    mfu: float | None
    fits: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_dict(),
            "source": "predicted",
            "step_time_s": self.step.total_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_device": self.tflops_per_device,
            "mfu": self.mfu,
            "fits": self.fits,
            "dominant": self.step.dominant(),
            "step": self.step.as_dict(),
            "memory": {
                "total_bytes": self.memory.total,
                **{f"{k}_bytes": v for k, v in self.memory.as_dict().items() if k != "total"},
            },
        }


@dataclass(frozen=True)
class Predictions:
    """The model's figures for each config of a table, as arrays; `row(i)` is config i's
    `Estimate`."""

    table: ConfigTable
    step: StepTime[np.ndarray]
    memory: MemoryBreakdown[np.ndarray]
    tokens_per_s: np.ndarray
    tflops_per_device: np.ndarray
    mfu: np.ndarray | None
    fits: np.ndarray

    def row(self, i: int) -> Estimate:
        return Estimate(
            config=self.table.config(i),
            step=self.step.row(i),
            memory=self.memory.row(i),
            tokens_per_s=float(self.tokens_per_s[i]),
            tflops_per_device=float(self.tflops_per_device[i]),
            mfu=None if self.mfu is None else float(self.mfu[i]),
            fits=bool(self.fits[i]),
        )


@dataclass(frozen=True)
class Predictor:
    """What the model computes of a table once: memory and the step time's parts, which no
    calibration of its four parameters changes; `at(cal)` predicts under a calibration (a
    search refits after every trial and predicts every candidate again)."""

    workload: Workload
    cluster: Cluster
    table: ConfigTable
    parts: StepParts
    memory: MemoryBreakdown[np.ndarray]

    @classmethod
    def of(
        cls,
        w: Workload,
        table: ConfigTable,
        cluster: Cluster,
        traits: EngineTraits,
        collectives: tuple[CollectiveFit, ...] = (),
        memory: MemoryBreakdown[np.ndarray] | None = None,
        runs: NcclRuns | None = None,
        stages: Stages | None = None,
    ) -> Predictor:
        """`memory`, which no calibration changes, may be known already, and the table's runs
        of NCCL variants (`runs`) and their layouts' `stages`. What no NCCL setting changes is
        computed once per layout."""
        runs = runs or table.nccl_runs()
        stages = stages or Stages.of(w, runs.layouts, traits)
        parts = step_parts(w, table, cluster, traits, collectives, runs, stages)
        if memory is None:
            generation = cluster.device.generation
            on_layouts = memory_breakdown(w, runs.layouts, traits, generation, stages)
            memory = on_layouts if runs.of_row is None else on_layouts.take(runs.of_row)
        return cls(w, cluster, table, parts, memory)

    def take(self, rows: np.ndarray) -> Predictor:
        """The model of these configs, in this order."""
        table, parts = self.table.take(rows), self.parts.take(rows)
        return Predictor(self.workload, self.cluster, table, parts, self.memory.take(rows))

    def at(self, cal: Calibration) -> Predictions:
        step = self.parts.time(cal)
        rate = throughput(self.workload, self.cluster, step.total_s)
        return Predictions(
            table=self.table,
            step=step,
            memory=self.memory,
            tokens_per_s=rate.tokens_per_s,
            tflops_per_device=rate.tflops_per_device,
            mfu=rate.mfu,
            fits=fits(self.memory, self.cluster.device),
        )


def predict(
    w: Workload,
    table: ConfigTable,
    cluster: Cluster,
    traits: EngineTraits,
    cal: Calibration | None = None,
) -> Predictions:
    """Step time and memory of every config of the table."""
    cal = cal or default_calibration(cluster.device.generation, traits)
    return Predictor.of(w, table, cluster, traits, cal.collectives).at(cal)


def estimate(
    w: Workload,
    config: TrainConfig,
    cluster: Cluster,
    traits: EngineTraits,
    cal: Calibration | None = None,
) -> Estimate:
    """Step time and memory of one config: the table model on a table of one."""
    return predict(w, ConfigTable.of([config]), cluster, traits, cal).row(0)
