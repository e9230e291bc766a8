"""The plan before any trial: configs predicted to fit, fastest first, and why each other one
cannot fit. Predicted as one table; an `Estimate` is made only for a config looked at."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import overload

import numpy as np

from autotune.estimate.predict import Estimate, Predictions, predict
from autotune.estimate.steptime import Calibration
from autotune.problem import Problem
from autotune.space import TrainConfig, config_key
from autotune.space.table import ConfigTable


@dataclass(frozen=True)
class Ranked(Sequence[Estimate]):
    """The configs predicted to fit, fastest first (equals in the order given)."""

    predictions: Predictions
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> Estimate: ...
    @overload
    def __getitem__(self, i: slice) -> list[Estimate]: ...
    def __getitem__(self, i: int | slice) -> Estimate | list[Estimate]:
        if isinstance(i, slice):
            return [self.predictions.row(int(r)) for r in self.rows[i]]
        return self.predictions.row(int(self.rows[i]))

    @property
    def table(self) -> ConfigTable:
        return self.predictions.table.take(self.rows)

    @property
    def configs(self) -> list[TrainConfig]:
        made = self.predictions.table.configs
        return [made[r] for r in self.rows]


@dataclass(frozen=True)
class TooBig(Mapping[str, str]):
    """Why each config predicted not to fit cannot, by config key."""

    predictions: Predictions
    rows: np.ndarray
    device_bytes: float

    @cached_property
    def _rows(self) -> dict[str, int]:
        made = self.predictions.table.configs
        return {config_key(made[r]): int(r) for r in self.rows}

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __getitem__(self, key: str) -> str:
        return memory_reason(self.predictions.row(self._rows[key]), self.device_bytes)


def memory_verdicts(
    problem: Problem, valid: Sequence[TrainConfig], cal: Calibration
) -> tuple[Ranked, TooBig]:
    """Predictions of the configs that fit, best first; and why each other one cannot fit,
    by config key."""
    p = predict(problem.workload, ConfigTable.of(valid), problem.cluster, problem.engine.name, cal)
    fitting = np.flatnonzero(p.fits)
    fastest = fitting[np.argsort(-p.tokens_per_s[fitting], kind="stable")]
    device = problem.cluster.device.memory_bytes
    return Ranked(p, fastest), TooBig(p, np.flatnonzero(~p.fits), device)


def memory_reason(e: Estimate, device_bytes: float) -> str:
    parts = ", ".join(
        f"{k} {v / 2**30:.1f}" for k, v in e.memory.as_dict().items() if k != "total" and v
    )
    return (
        f"predicted not to fit: {e.memory.total / 2**30:.1f} GiB per rank > "
        f"{device_bytes / 2**30:.1f} GiB ({parts} GiB)"
    )
