"""Array helpers of the table model: formulas over one config's numbers or a column of a
table's, and grouping rows by the few knobs a quantity depends on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import numpy as np

Values = TypeVar("Values", float, np.ndarray)
"""A formula's operands: one config's numbers, or a column of a table's."""


def grouped(*keys: np.ndarray) -> Iterator[tuple[tuple[Any, ...], np.ndarray]]:
    """The distinct combinations of these columns' values, each with the rows that hold it:
    what depends on a few knobs only is computed once per combination, not per config. For
    columns of few values (knobs, group sizes, settings): the combinations are numbered by
    the product of the columns' ranges, which must stay within int64."""
    if not len(keys[0]):
        return
    combined = np.zeros(len(keys[0]), dtype=np.int64)
    for key in keys:
        codes, count = _codes(key)
        combined = combined * count + codes
    if combined.max() < 2**16:
        combined = combined.astype(np.uint16)  # sorted by radix, in linear time
    order = np.argsort(combined, kind="stable")
    bounds = np.flatnonzero(np.diff(combined[order])) + 1
    for rows in np.split(order, bounds):
        yield tuple(key[rows[0]].item() for key in keys), rows


def _codes(key: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value as a number from 0, and how many there can be: integers by their offset
    from the least, anything else (a few distinct words) by one comparison per value."""
    if key.dtype.kind in "iub":
        low = int(key.min())
        return key.astype(np.int64) - low, int(key.max()) - low + 1
    codes = np.empty(len(key), dtype=np.int64)
    rest = np.arange(len(key))
    count = 0
    while len(rest):
        same = key[rest] == key[rest[0]]
        codes[rest[same]] = count
        rest = rest[~same]
        count += 1
    return codes, count
