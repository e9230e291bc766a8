"""Numbers as a person reads them: bytes in MiB or GiB, counts as 50M, throughput with
thousands separators, step times in ms, durations in s, min or h, and configs with their
knobs as users write them. No scientific notation. Exports and JSON keep the raw values."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

COUNT_KNOBS = frozenset({"reduce_bucket", "allgather_bucket"})
"""Knobs counted in elements, shown and accepted as users write them: 50M, 5e8, 500000000."""

_SUFFIXES = (("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3))
_COUNT = re.compile(r"\s*([-+]?\d+(?:\.\d*)?(?:e[+-]?\d+)?)\s*([kmgt]?)\s*", re.IGNORECASE)


def human_bytes(n: float | None) -> str:
    """1536 -> "1.5 KiB", 466059123 -> "444.5 MiB"; None -> "-"."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"


def human_count(n: float) -> str:
    """A count as users write it: 2e8 -> "200M", 50_000_000 -> "50M", 1536 -> "1.536K"."""
    for suffix, size in _SUFFIXES:
        if abs(n) >= size:
            return f"{_plain(n / size, 12)}{suffix}"
    return _plain(n, 12)


def parse_count(text: str) -> float | None:
    """ "50M" -> 5e7, "5e8" -> 5e8, "1.5K" -> 1500.0; None when `text` is no count."""
    match = _COUNT.fullmatch(text)
    if match is None:
        return None
    size = dict(_SUFFIXES).get(match.group(2).upper(), 1)
    return float(match.group(1)) * size


def human_rate(tokens_per_s: float | None) -> str:
    """40213.4 -> "40,213 tok/s"."""
    if tokens_per_s is None or _missing(tokens_per_s):
        return "-"
    return f"{tokens_per_s:,.0f} tok/s"


def human_ms(seconds: float | None) -> str:
    """A step time: 0.0240 -> "24.0 ms", 5.3315 -> "5.33 s" (seconds from 1,000 ms on)."""
    if seconds is None or _missing(seconds):
        return "-"
    if abs(seconds) >= 1:
        return f"{seconds:,.3g} s" if abs(seconds) < 1000 else f"{seconds:,.0f} s"
    return f"{seconds * 1e3:,.1f} ms"


def human_duration(seconds: float | None) -> str:
    """A wall time: "1.2 s", "3 min", "2.5 h"."""
    if seconds is None or _missing(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes = seconds / 60
        return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def plain_number(value: float, digits: int = 4) -> str:
    """About `digits` significant digits, thousands separated, never in scientific
    notation: 466059123.0 -> "466,059,123", 1.234e-05 -> "0.00001234"."""
    return _plain(value, digits, grouped=True)


def knob_text(name: str, value: Any) -> str:
    """One knob's value as users write it: buckets as 50M, booleans as true/false."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # numpy's from a table
        return str(value).lower()
    if name in COUNT_KNOBS and isinstance(value, numbers.Real):
        return human_count(float(value))
    return str(value)


def display_label(config: Any) -> str:
    """A config as users write it, `zero=2,mbs=4,reduce_bucket=50M`: from a TrainConfig,
    a mapping of its knobs, or a stored label (`TrainConfig.label()`); "-" for none."""
    return ",".join(f"{k}={v}" for k, v in label_items(config).items()) or "-"


def label_items(config: Any) -> dict[str, str]:
    """The knobs a display label shows, in order, as text."""
    if config is None:
        return {}
    if hasattr(config, "differs_from_default"):
        config = config.differs_from_default()
    if isinstance(config, Mapping):
        return {str(k): knob_text(str(k), v) for k, v in config.items()}
    items: dict[str, str] = {}
    for part in filter(None, str(config).split(",")):
        name, _, value = part.partition("=")
        items[name] = knob_text(name, _stored_value(name, value))
    return items


def column_text(key: str, value: Any) -> str:
    """A cell of a trial table (`report.table`'s columns and knobs) on one line."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key == "tokens_per_s":
        return f"{value:,.0f}"
    if key in ("mfu", "interval"):
        return f"{value:.1%}"
    if key == "step_time_s":
        return human_ms(value)
    if key == "measured_steps":
        return str(int(value))
    if key.endswith("_bytes"):
        return human_bytes(value)
    if isinstance(value, float) and not value.is_integer():
        return plain_number(value)
    return " ".join(knob_text(key, value).split())  # one line: no newline of an error


def _stored_value(name: str, text: str) -> Any:
    """A value read back from a label's text: True/False and bucket counts typed."""
    if text in ("True", "False"):
        return text == "True"
    if name in COUNT_KNOBS and text.isdigit():
        return int(text)
    return text


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: float, digits: int, grouped: bool = False) -> str:
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}" if grouped else f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
