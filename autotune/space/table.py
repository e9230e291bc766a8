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

NUMBERS = (
    *("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "zero", "hsdp", "mbs"),
    "recompute_num_layers",
    *("reduce_bucket", "allgather_bucket", "ddp_bucket_mb"),
)
FLAGS = ("sp", "overlap_comm", "overlap_param_gather", "offload_optimizer", "offload_param")
WORDS = (
    *("recompute", "recompute_method", "recompute_modules", "moe_dispatcher"),
    *("nccl_algo", "nccl_proto"),
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
