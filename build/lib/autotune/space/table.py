"""Configs as columns: a space's valid configs as one array per knob, which the model predicts
all at once and the enumeration builds a block at a time. A `TrainConfig` object is made only
for a row looked at (all of them only when a study needs them all)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, overload

import numpy as np

from autotune.space.config import KNOBS, TrainConfig

BUCKET_KNOBS = ("reduce_bucket", "allgather_bucket", "ddp_bucket_mb")
"""Bucket sizes: how gradients and parameters are grouped into collectives, which a settled
layout refines as it does NCCL's settings."""
NUMBERS = (
    *("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "zero", "hsdp", "mbs"),
    "recompute_num_layers",
    *BUCKET_KNOBS,
)
FLAGS = (
    *("sp", "overlap_comm", "overlap_param_gather", "offload_optimizer", "offload_param"),
    *("tp_comm_overlap", "ep_comm_overlap"),
)
NCCL_KNOBS = ("nccl_algo", "nccl_proto")
WORDS = (
    *("recompute", "recompute_method", "recompute_modules", "moe_dispatcher"),
    *NCCL_KNOBS,
)
DTYPES: dict[str, Any] = {
    **{name: np.int64 for name in NUMBERS},
    **{name: np.bool_ for name in FLAGS},
    **{name: str for name in WORDS},
}
assert set(DTYPES) == set(KNOBS), "every knob needs a column"


@dataclass(frozen=True, eq=False)
class ConfigTable(Sequence[TrainConfig]):
    """One array per knob, row i being config i: integers as int64, flags as bool, words
    (recompute, NCCL algorithm...) as strings, compared with `==` like the knobs."""

    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    zero: np.ndarray
    hsdp: np.ndarray
    mbs: np.ndarray
    recompute_num_layers: np.ndarray
    reduce_bucket: np.ndarray
    allgather_bucket: np.ndarray
    ddp_bucket_mb: np.ndarray
    sp: np.ndarray
    overlap_comm: np.ndarray
    overlap_param_gather: np.ndarray
    offload_optimizer: np.ndarray
    offload_param: np.ndarray
    tp_comm_overlap: np.ndarray
    ep_comm_overlap: np.ndarray
    recompute: np.ndarray
    recompute_method: np.ndarray
    recompute_modules: np.ndarray
    moe_dispatcher: np.ndarray
    nccl_algo: np.ndarray
    nccl_proto: np.ndarray

    @classmethod
    def of(cls, configs: Sequence[TrainConfig]) -> ConfigTable:
        if isinstance(configs, ConfigTable):
            return configs
        n = len(configs)

        def column(name: str) -> np.ndarray:
            values = (getattr(c, name) for c in configs)
            if DTYPES[name] is str:
                return np.array(list(values), dtype=str)
            return np.fromiter(values, dtype=DTYPES[name], count=n)

        table = cls(**{name: column(name) for name in DTYPES})
        table.__dict__["configs"] = tuple(configs)  # known already: never rebuilt
        return table

    def __len__(self) -> int:
        return len(self.tp)

    @overload
    def __getitem__(self, i: int) -> TrainConfig: ...
    @overload
    def __getitem__(self, i: slice) -> list[TrainConfig]: ...
    def __getitem__(self, i: int | slice) -> TrainConfig | list[TrainConfig]:
        if isinstance(i, slice):
            return [self.config(r) for r in range(len(self))[i]]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self.config(i)

    def __iter__(self) -> Iterator[TrainConfig]:
        return iter(self.configs)

    def config(self, i: int) -> TrainConfig:
        """Row i as a config (the one made already, if the table has them)."""
        made = self.__dict__.get("configs")
        if made is not None:
            return made[i]
        return TrainConfig(**{name: getattr(self, name)[i].item() for name in DTYPES})

    @cached_property
    def configs(self) -> tuple[TrainConfig, ...]:
        rows = zip(*(getattr(self, name).tolist() for name in DTYPES), strict=True)
        return tuple(TrainConfig(**dict(zip(DTYPES, row, strict=True))) for row in rows)

    def row_of(self, config: TrainConfig) -> int | None:
        """The first row holding this config, if one does."""
        same = np.ones(len(self), dtype=bool)
        for name in DTYPES:
            same &= getattr(self, name) == getattr(config, name)
        rows = np.flatnonzero(same)
        return int(rows[0]) if len(rows) else None

    def recomputes(self, module: str) -> np.ndarray:
        """Per config, whether its `recompute_modules` names `module`."""
        return self._modules.get(module, np.zeros(len(self), dtype=bool))

    @cached_property
    def _modules(self) -> dict[str, np.ndarray]:
        """Each module named in `recompute_modules`, with the configs that name it: one pass
        over the column, which the model reads several times."""
        found: dict[str, np.ndarray] = {}
        left = np.ones(len(self), dtype=bool)
        while left.any():  # one comparison per distinct list, of which there are few
            value = self.recompute_modules[np.argmax(left)]
            rows = self.recompute_modules == value
            for name in str(value).split("+"):
                found[name] = found.get(name, np.zeros(len(self), dtype=bool)) | rows
            left &= ~rows
        return found

    def grad_accum(self, global_batch_size: int) -> np.ndarray:
        """Micro-batches per optimizer step on each data-parallel rank."""
        return global_batch_size // (self.mbs * self.dp)

    def take(self, rows: np.ndarray) -> ConfigTable:
        """The table of these rows, in this order."""
        return ConfigTable(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def nccl_runs(self) -> NcclRuns:
        """The runs of adjacent rows that differ only in NCCL settings (the spaces list those
        knobs last, so the walk puts a layout's variants side by side; rows in another order
        make shorter runs, with the same results): what no NCCL setting changes, memory and
        compute, is computed once per run."""
        starts = np.zeros(len(self), dtype=bool)
        starts[:1] = True
        for name in DTYPES:
            if name not in NCCL_KNOBS:
                column = getattr(self, name)
                starts[1:] |= column[1:] != column[:-1]
        if starts.all():
            return NcclRuns(self, None)
        return NcclRuns(self.take(np.flatnonzero(starts)), np.cumsum(starts) - 1)


@dataclass(frozen=True)
class NcclRuns:
    """A table's rows grouped into runs that differ only in NCCL settings: `layouts` holds
    each run's first row, `of_row` each row's run (None: every row is its own)."""

    layouts: ConfigTable
    of_row: np.ndarray | None

    def spread(self, per_run: np.ndarray) -> np.ndarray:
        """Per-run values (the last axis) to the table's rows."""
        return per_run if self.of_row is None else per_run[..., self.of_row]

    def take(self, rows: np.ndarray) -> tuple[NcclRuns, np.ndarray]:
        """The runs of the table's `rows`, in table order, and which runs of this table they
        are; a run cut short (a plan's chunk of rows) is a run of the rows kept."""
        if self.of_row is None:
            return NcclRuns(self.layouts.take(rows), None), rows
        runs = self.of_row[rows]
        starts = np.ones(len(rows), dtype=bool)
        starts[1:] = runs[1:] != runs[:-1]
        kept = runs[starts]
        return NcclRuns(self.layouts.take(kept), np.cumsum(starts) - 1), kept
