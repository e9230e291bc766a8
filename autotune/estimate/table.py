"""Configs as columns: the model predicts a whole table of them with array arithmetic, a plan's
hundreds of thousands as fast as a handful, and one config as a table of one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np

from autotune.space import TrainConfig

Values = TypeVar("Values", int, float, np.ndarray)
"""A formula's operands: one config's numbers, or a column of a table's."""

NUMBERS = (
    *("tp", "pp", "vpp", "cp", "dp", "zero", "mbs", "recompute_num_layers"),
    *("reduce_bucket", "allgather_bucket", "ddp_bucket_mb"),
)
FLAGS = ("sp", "overlap_comm", "overlap_param_gather")
WORDS = ("recompute", "recompute_method", "nccl_algo", "nccl_proto")


@dataclass(frozen=True)
class ConfigTable:
    """One array per knob, row i being `configs[i]`: integers as int64, flags as bool,
    words (recompute, NCCL algorithm...) as strings, compared with `==` like the knobs."""

    configs: tuple[TrainConfig, ...]
    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    zero: np.ndarray
    mbs: np.ndarray
    recompute_num_layers: np.ndarray
    reduce_bucket: np.ndarray
    allgather_bucket: np.ndarray
    ddp_bucket_mb: np.ndarray
    sp: np.ndarray
    overlap_comm: np.ndarray
    overlap_param_gather: np.ndarray
    recompute: np.ndarray
    recompute_method: np.ndarray
    nccl_algo: np.ndarray
    nccl_proto: np.ndarray

    @classmethod
    def of(cls, configs: Sequence[TrainConfig]) -> ConfigTable:
        n = len(configs)

        def column(name: str, kind: type) -> np.ndarray:
            return np.fromiter((getattr(c, name) for c in configs), dtype=kind, count=n)

        return cls(
            configs=tuple(configs),
            **{name: column(name, np.int64) for name in NUMBERS},
            **{name: column(name, np.bool_) for name in FLAGS},
            **{name: np.array([getattr(c, name) for c in configs], dtype=str) for name in WORDS},
        )

    def __len__(self) -> int:
        return len(self.configs)

    def grad_accum(self, global_batch_size: int) -> np.ndarray:
        """Micro-batches per optimizer step on each data-parallel rank."""
        return global_batch_size // (self.mbs * self.dp)

    def take(self, rows: np.ndarray) -> ConfigTable:
        """The table of these rows, in this order."""
        columns = {f.name: getattr(self, f.name)[rows] for f in fields(self)[1:]}
        return ConfigTable(configs=tuple(self.configs[i] for i in rows), **columns)


def grouped(*keys: np.ndarray) -> Iterator[tuple[tuple[Any, ...], np.ndarray]]:
    """The distinct combinations of these columns' values, each with the rows that hold it:
    what depends on a few knobs only is computed once per combination, not per config."""
    if not len(keys[0]):
        return
    combined = np.zeros(len(keys[0]), dtype=np.int64)
    for key in keys:
        if key.dtype.kind in "iub":
            low = key.min()
            codes, count = key.astype(np.int64) - low, int(key.max() - low) + 1
        else:
            values, codes = np.unique(key, return_inverse=True)
            count = len(values)
        combined = combined * count + codes.reshape(-1)
    order = np.argsort(combined, kind="stable")
    bounds = np.flatnonzero(np.diff(combined[order])) + 1
    for rows in np.split(order, bounds):
        yield tuple(key[rows[0]].item() for key in keys), rows
