"""The guided search's candidates as small integers: each knob's value as a code, each
config as a number, and each config's layout (its number with the `REFINING` knobs at their
defaults), so that finding a key, a layout or a shared knob value is array arithmetic over a
hundred thousand configs."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from autotune.space import TrainConfig
from autotune.space.config import KNOBS
from autotune.space.table import BUCKET_KNOBS, NCCL_KNOBS, ConfigTable

REFINING = (*NCCL_KNOBS, *BUCKET_KNOBS)
"""Knobs that change only how collectives run: a settled layout's refinements, tried once no
other layout could beat it (a layout: a config with these at their defaults)."""


@dataclass(frozen=True)
class Codes:
    """Each candidate's knob values as codes, one row per knob (knob-major, so a distance to
    a measured config is a pass over each knob's contiguous codes)."""

    value_codes: dict[str, dict[object, int]]
    codes: np.ndarray
    weights: np.ndarray
    """Each knob's place value: a config's codes weighted by them are its number, by which
    keys are found among the candidates (`numbers`, sorted, `by_number` their rows)."""
    numbers: np.ndarray
    by_number: np.ndarray
    refining: np.ndarray
    """Per knob, whether it is one of `REFINING`; `base`: each knob's default's code."""
    base: np.ndarray

    @classmethod
    def of(cls, table: ConfigTable) -> Codes:
        value_codes, columns = {}, []
        for name in KNOBS:
            values, codes = np.unique(getattr(table, name), return_inverse=True)
            value_codes[name] = {v: i for i, v in enumerate(values.tolist())}
            columns.append(codes.reshape(-1))
        radix = [len(value_codes[name]) + 1 for name in KNOBS]  # + 1: a value unseen
        if math.prod(radix) >= 2**62:
            raise ValueError("too many knob values to number the configs of the space")
        weights = np.cumprod([1, *radix[:-1]]).astype(np.int64)
        stacked = np.stack(columns).astype(np.int16)
        numbers = weights @ stacked.astype(np.int64)
        by_number = np.argsort(numbers, kind="stable")
        refining = np.array([name in REFINING for name in KNOBS])
        base = _encode(value_codes, TrainConfig()).astype(np.int64)
        return cls(value_codes, stacked, weights, numbers[by_number], by_number, refining, base)

    def encode(self, config: TrainConfig) -> np.ndarray:
        """The config's knob codes; a value no candidate has gets the code past the last."""
        return _encode(self.value_codes, config)

    def row(self, key: str) -> int | None:
        """The candidate with this key, if any."""
        try:
            config = TrainConfig(**json.loads(key))
        except TypeError:  # a knob this version does not have: no candidate has it
            return None
        number = int(self.encode(config).astype(np.int64) @ self.weights)
        at = int(np.searchsorted(self.numbers, number))
        found = at < len(self.numbers) and self.numbers[at] == number
        return int(self.by_number[at]) if found else None

    def layout_of(self, codes: np.ndarray) -> np.ndarray:
        """The layout of configs given by their codes (knob-major): their number with the
        `REFINING` knobs at their defaults."""
        codes = codes.astype(np.int64)
        refined = (codes[self.refining].T - self.base[self.refining]).T
        return self.weights @ codes - self.weights[self.refining] @ refined

    def plainest(self, layout_of: np.ndarray) -> np.ndarray:
        """Whether each candidate stands for its layout: of those with the same layout, the
        one with the fewest `REFINING` knobs off their defaults (the first in table order),
        so a layout whose default bucket does not fit is still proposed."""
        refined = self.codes[self.refining] != self.base[self.refining, None]
        order = np.lexsort((refined.sum(axis=0), layout_of))
        first = np.ones(len(order), dtype=bool)
        first[1:] = layout_of[order][1:] != layout_of[order][:-1]
        plainest = np.zeros(len(order), dtype=bool)
        plainest[order[first]] = True
        return plainest


def _encode(value_codes: dict[str, dict[object, int]], config: TrainConfig) -> np.ndarray:
    return np.array(
        [value_codes[name].get(getattr(config, name), len(value_codes[name])) for name in KNOBS],
        dtype=np.int16,
    )


@dataclass(frozen=True)
class Scored:
    """The configs still open, as rows of the candidate table, with each one's optimistic
    log tokens/s (unsorted: a proposal needs only the best)."""

    rows: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def best(self, tie: float) -> np.ndarray:
        """The rows scored within `tie` of the best, best first (equals in table order)."""
        near = np.flatnonzero(self.score >= self.score.max() - tie)
        return self.rows[near[np.argsort(-self.score[near], kind="stable")]]
