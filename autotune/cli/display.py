"""Rich output for the terminal commands. Formatting only; nothing here decides anything."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from autotune.estimate.predict import Estimate
from autotune.problem import Problem
from autotune.runner import TrialRecord
from autotune.space import Enumeration, nccl_default
from autotune.trial.result import TrialResult
from autotune.units import (
    column_text,
    display_label,
    human_bytes,
    human_count,
    human_duration,
    human_ms,
    knob_text,
    label_items,
    plain_number,
)

if TYPE_CHECKING:  # a plan needs none of the study's imports (optuna, scipy)
    import pandas as pd

    from autotune.calibration.from_study import CalibrationReport


def space_summary(console: Console, problem: Problem, found: Enumeration, sample: int) -> None:
    console.print(
        f"[bold]{problem.engine.name}[/] on {problem.workload.name} / "
        f"{problem.cluster.name} (world size {problem.cluster.world_size}), "
        f"space {problem.space.source}"
    )
    console.print(f"{len(found.valid)} valid of {found.total} configs")
    knobs = Table("knob", "values", f"meaning in {problem.engine.name}", "from", title="knobs")
    for knob, values in problem.space.values.items():
        meaning = problem.engine.knob_meanings.get(knob, "")
        origin = problem.space.origins.get(knob, problem.space.source)
        knobs.add_row(knob, ", ".join(knob_text(knob, v) for v in values), meaning, origin)
    console.print(knobs)
    if found.removed:
        rules = {r.name: r.reason for r in problem.rules}
        table = Table("rule", "removed", "why", title="removed by rule (first rule broken)")
        for name, count in sorted(found.removed.items(), key=lambda kv: -kv[1]):
            table.add_row(name, str(count), rules.get(name, ""))
        console.print(table)
    for config in found.valid[:sample]:
        console.print(f"  {display_label(config)}")


def measured_how(r: TrialResult) -> str:
    """How precisely, and why no longer: " ±1.2% (4 steps, precise)"; empty when simulated."""
    if r.stopped_for is None:
        return ""
    interval = f" ±{r.interval:.1%}" if r.interval is not None else ""
    return f"{interval} ({r.measured_steps} steps, {r.stopped_for})"


def trial_record(console: Console, record: TrialRecord) -> None:
    if record.kind != "ok" or record.result is None:
        console.print(f"[red]{record.kind}[/]: {record.error}")
        console.print(f"files: {record.folder}")
        return
    r = record.result
    low, high = r.step_time_min_s or r.step_time_s, r.step_time_max_s or r.step_time_s
    table = Table("metric", "value", title="measured")
    rows = [
        (
            "step time (median)",
            f"{human_ms(r.step_time_s)} (min {human_ms(low)}, max {human_ms(high)})",
        ),
        ("tokens/s", f"{r.tokens_per_s:,.0f}"),
        ("TFLOP/s per device", f"{r.tflops_per_device:.3f}"),
        ("MFU", f"{r.mfu:.1%}" if r.mfu is not None else "-"),
        ("peak memory", f"{human_bytes(r.peak_memory_bytes)} ({r.peak_memory_kind})"),
        ("model states (max rank)", human_bytes(r.model_state_bytes)),
        ("warm-up / measured steps", f"{r.warmup_steps} / {r.measured_steps}{measured_how(r)}"),
    ]
    if r.profile:
        p = r.profile
        rows.append(
            (
                "profiled step: comm / rest",
                f"{human_ms(p['comm_s'])} / {human_ms(p['compute_s'])}",
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    console.print(f"files: {record.folder}")


class RichProgress:
    """One line when a trial starts and one when it ends."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def started(self, number: int, label: str) -> None:
        self.console.print(f"trial {number:>3} [dim]running[/]  {_shown(label)}")

    def finished(self, number: int, label: str, record: TrialRecord, best: float | None) -> None:
        best_text = f"best {best:,.0f} tok/s" if best else "no success yet"
        if record.kind == "ok" and record.result is not None:
            r = record.result
            mark = " [green]★[/]" if best is not None and r.tokens_per_s >= best else ""
            self.console.print(
                f"trial {number:>3} [green]ok[/]       {_shown(label)}  "
                f"{r.tokens_per_s:,.0f} tok/s{mark}{measured_how(r)}  "
                f"({best_text}, {human_duration(record.wall_s)})"
            )
        else:
            self.console.print(
                f"trial {number:>3} [red]{record.kind}[/]  {_shown(label)}  {record.error}  "
                f"({best_text})"
            )


def _shown(label: str) -> str:
    """A progress label (`TrainConfig.label()`, perhaps with a note after a space) as users
    write the config."""
    config, space, note = label.partition(" ")
    return display_label(config) + space + note


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


def estimate(console: Console, problem: Problem, e: Estimate, calibration: str) -> None:
    console.print(
        f"[bold]predicted[/] {problem.engine.name} {display_label(e.config)} on "
        f"{problem.workload.name} / {problem.cluster.name} (calibration: {calibration})"
    )
    step = Table("step time", "time", "share", title="where the time goes")
    total = e.step.total_s
    for name, value in e.step.as_dict().items():
        if name != "total_s":
            step.add_row(
                name.removesuffix("_s"),
                human_ms(value),
                f"{value / total:.0%}" if name not in ("dp_comm_s", "recompute_s") else "",
            )
    step.add_row("[bold]total[/]", human_ms(total), "")
    memory = Table("memory per rank", "size", title="worst rank")
    for name, value in e.memory.as_dict().items():
        memory.add_row(name, human_bytes(value))
    console.print(step, memory)
    fit = "fits" if e.fits else "[red]does not fit[/]"
    mfu = f"{e.mfu:.1%}" if e.mfu is not None else "-"
    console.print(
        f"tokens/s {e.tokens_per_s:,.0f}, {e.tflops_per_device:.1f} TFLOP/s per "
        f"device, MFU {mfu}; {fit} in {human_bytes(problem.cluster.device.memory_bytes)}"
    )


def plan(
    console: Console,
    problem: Problem,
    found: Enumeration,
    ranked: Sequence[Estimate],
    too_big: int,
    shown: list[Estimate],
    calibration: str,
    top: int = 0,
) -> None:
    """The plan's counts and its table, best predicted first: configs that differ only in
    NCCL settings with the same prediction folded into one row (`top` rows at most; 0: all),
    configs broken between knobs, the cluster's tokens/s so labelled, and what a prediction
    is worth said beside it."""
    console.print(
        f"[bold]plan[/] {problem.engine.name} on {problem.workload.name} / "
        f"{problem.cluster.name}: {found.total:,} configs, {len(found.valid):,} valid, "
        f"{too_big:,} predicted not to fit, {len(ranked):,} ranked "
        f"(predicted; calibration: {calibration})"
    )
    removed = ", ".join(
        f"{k} {v:,}" for k, v in sorted(found.removed.items(), key=lambda x: -x[1])
    )
    console.print(f"removed by rule: {removed or 'none'}; by the memory check: {too_big:,}")
    table = Table("#", title="best predicted first")
    table.add_column("config")
    for name in ("tokens/s (cluster)", "MFU", "step", "memory/rank", "dominant"):
        table.add_column(name, justify="right" if name != "dominant" else "left", no_wrap=True)
    for i, (e, variants) in enumerate(_folded(shown, top), 1):
        same = f" (+{variants} NCCL variant{'s' if variants > 1 else ''}, same prediction)"
        table.add_row(
            str(i),
            ", ".join(f"{k}={v}" for k, v in label_items(e.config).items())
            + (same if variants else ""),
            f"{e.tokens_per_s:,.0f}",
            f"{e.mfu:.1%}" if e.mfu is not None else "-",
            human_ms(e.step.total_s),
            human_bytes(e.memory.total),
            e.step.dominant(),
        )
    console.print(table)
    console.print(
        "Every figure is the model's prediction, not a measurement: its error on published "
        "runs is in results/bench/costmodel_validation.md; `autotune run` measures."
    )


def _folded(estimates: Sequence[Estimate], top: int) -> list[tuple[Estimate, int]]:
    """The estimates, each run of configs that differ only in NCCL settings with the same
    prediction as one row (the first of them) and how many more it stands for."""
    rows: list[tuple[Estimate, int]] = []
    for e in estimates:
        if rows and _same_layout(rows[-1][0], e):
            rows[-1] = (rows[-1][0], rows[-1][1] + 1)
        elif top and len(rows) == top:
            break
        else:
            rows.append((e, 0))
    return rows


def _same_layout(a: Estimate, b: Estimate) -> bool:
    return nccl_default(a.config) == nccl_default(b.config) and math.isclose(
        a.tokens_per_s, b.tokens_per_s, rel_tol=1e-9
    )


def calibration(console: Console, report: CalibrationReport) -> None:
    table = Table("parameter", "before", "after", title=f"fitted to {report.trials} trials")
    for name in ("compute_efficiency", "gemm_half_size", "bandwidth_scale", "overlap"):
        table.add_row(
            name,
            plain_number(getattr(report.before, name)),
            plain_number(getattr(report.after, name)),
        )
    console.print(table)
    if report.held_out_before is not None:
        console.print(
            f"median error on held-out configs: {report.held_out_before:.1%} before, "
            f"{report.held_out_after:.1%} after fitting (two folds, each config's repeats "
            "in one)"
        )
    console.print(
        f"median error on all trials (in sample): {report.in_sample_before:.1%} before, "
        f"{report.in_sample_after:.1%} after"
    )
    console.print("saved: " + ", ".join(str(p) for p in report.saved_to))
