"""The trial tables of `autotune trials`: one row per config (the default) or per launch,
fitted to the terminal without cutting a value. Formatting only."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from autotune.units import column_text, human_count, label_items

if TYPE_CHECKING:
    import pandas as pd

HEADERS = {
    "number": "#",
    "label": "config",
    "tokens_per_s": "tokens/s",
    "mfu": "MFU",
    "step_time_s": "step",
    "interval": "±",
    "measured_steps": "steps",
    "stopped_for": "stopped",
    "peak_memory_bytes": "peak mem",
    "error": "reason",
}
RIGHT = ("tokens_per_s", "mfu", "step_time_s", "interval", "measured_steps", "peak_memory_bytes")
TABLE_COLUMNS = (
    "number",
    "label",
    "role",
    "kind",
    "tokens_per_s",
    "mfu",
    "step_time_s",
    "interval",
    "measured_steps",
    "stopped_for",
    "peak_memory_bytes",
    "source",
    "error",
)


def trial_table(console: Console, frame: pd.DataFrame, engine: str | None = None) -> None:
    """The terminal view, one line per trial: the config as its display label showing the
    knobs that differ between the rows; columns the same in every row are said once above
    the table instead, but for a role every trial has as a search trial (CSV and JSON keep
    every column, a column per knob, raw numbers)."""
    rows = [
        {k: column_text(k, row.get(k)) for k in TABLE_COLUMNS} for row in frame.to_dict("records")
    ]
    labels = [label_items(row.get("label")) for row in frame.to_dict("records")]
    shared = _shared_knobs(labels) if len(rows) > 1 else {}
    for row, items in zip(rows, labels, strict=True):
        row["label"] = ",".join(f"{k}={v}" for k, v in items.items() if k not in shared) or "-"
    columns = [k for k in TABLE_COLUMNS if k == "number" or _varies(rows, k)]
    common = [f"engine {engine}"] if engine else []
    common += [f"{k}={v}" for k, v in shared.items()]
    common += [
        f"{HEADERS.get(k, k)} {rows[0][k]}"
        for k in TABLE_COLUMNS
        if k not in columns and k != "label" and rows and rows[0][k] not in ("-", "search")
    ]
    if common and len(rows) > 1:
        console.print("all trials: " + ", ".join(common))
    columns = _fitting(columns, rows, console.width)
    table = Table(title="trials, best first")
    for name in columns:
        table.add_column(
            HEADERS.get(name, name),
            justify="right" if name in RIGHT else "left",
            no_wrap=name != "error",  # only the reason narrows, each cell ending in "…"
            overflow="ellipsis",
        )
    for row in rows:
        table.add_row(
            *[
                Text(row[k], no_wrap=True, overflow="ellipsis") if k == "error" else row[k]
                for k in columns
            ]
        )
    console.print(table)


DROPPED_FIRST = ("stopped_for", "mfu", "role", "measured_steps", "peak_memory_bytes", "error")
"""Columns left out, in turn, of a table too wide for the terminal: a value is never cut."""
REASON_WIDTH = 12
"""The least a reason cell keeps (it alone is cut, ending in "…")."""


def _fitting(columns: list[str], rows: list[dict[str, str]], width: int) -> list[str]:
    """`columns` less those (`DROPPED_FIRST`, in turn) a table of `width` has no room for:
    each column needs its widest cell, the reason `REASON_WIDTH`, and 3 for its borders."""
    kept = list(columns)

    def needed() -> int:
        cells = {k: max([len(HEADERS.get(k, k)), *(len(r[k]) for r in rows)]) for k in kept}
        if "error" in cells:
            cells["error"] = min(cells["error"], REASON_WIDTH)
        return sum(cells.values()) + 3 * len(kept) + 1

    for column in DROPPED_FIRST:
        if needed() <= width:
            break
        if column in kept:
            kept.remove(column)
    return kept


CONFIG_HEADERS = {
    "first": "#",
    "label": "config",
    "tokens_per_s": "tok/s",
    "interval": "95% range",
    "launches": "runs",
    "mfu": "MFU",
    "step_time_s": "step",
    "peak_memory_bytes": "memory",
    "outcome": "",
}
"""The per-config table's columns and headers, narrow enough for 80 columns."""


def config_table(console: Console, frame: pd.DataFrame, engine: str | None = None) -> None:
    """The terminal view, one line per config, readable at 80 columns: the config as the
    knobs that differ between rows (said once above the table where every row shares them,
    broken between knobs, never inside one), its standing and interval, how many launches,
    MFU, step time and memory; ★ marks the winner, "yours" the user's own config."""
    records = frame.to_dict("records")
    labels = [label_items(row.get("label")) for row in records]
    shared = _shared_knobs(labels) if len(records) > 1 else {}
    common = ([f"engine {engine}"] if engine else []) + [f"{k}={v}" for k, v in shared.items()]
    if common and len(records) > 1:
        console.print("every config: " + ", ".join(common))
    table = Table(
        title="configs, the winner first",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for key, header in CONFIG_HEADERS.items():
        right = key not in ("label", "outcome")
        table.add_column(header, justify="right" if right else "left", no_wrap=key != "label")
    for row, items in zip(records, labels, strict=True):
        knobs = ", ".join(f"{k}={v}" for k, v in items.items() if k not in shared) or "-"
        marks = ["★" if row["winner"] else "", "yours" if row["yours"] else ""]
        if row["outcome"] != "ok":
            marks.append(str(row["outcome"]))
        table.add_row(
            str(row["first"]),
            knobs,
            column_text("tokens_per_s", row["tokens_per_s"]),
            _range(row["tokens_per_s"], row["interval"]),
            str(row["launches"]),
            column_text("mfu", row["mfu"]),
            column_text("step_time_s", row["step_time_s"]),
            column_text("peak_memory_bytes", row["peak_memory_bytes"]),
            " ".join(m for m in marks if m),
        )
    console.print(table)


def _range(tokens: float | None, interval: float | None) -> str:
    """A standing's 95% interval as the range of tokens/s it spans: 27.1K-59.6K (a relative
    half-width of 250% says little a person can plan with)."""
    if tokens is None or interval is None or tokens != tokens or interval != interval:
        return "-"
    half = math.log1p(interval)
    low, high = tokens * math.exp(-half), tokens * math.exp(half)
    return f"{human_count(float(f'{low:.3g}'))}-{human_count(float(f'{high:.3g}'))}"


def _shared_knobs(labels: list[dict[str, str]]) -> dict[str, str]:
    """Knobs every label sets to the same value."""
    first = labels[0] if labels else {}
    return {k: v for k, v in first.items() if all(items.get(k) == v for items in labels)}


def _varies(rows: list[dict[str, str]], key: str) -> bool:
    """Whether a column differs between rows (every column shows when there is one row)."""
    return len(rows) < 2 or len({row[key] for row in rows}) > 1
