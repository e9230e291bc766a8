"""Rich output for the terminal commands. Formatting only; nothing here decides anything."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from autotune.estimate.predict import Estimate
from autotune.problem import Problem
from autotune.runner import TrialRecord
from autotune.space import Enumeration, nccl_default
from autotune.trial.result import TrialResult
from autotune.units import (
    display_label,
    human_bytes,
    human_duration,
    human_ms,
    knob_text,
    label_items,
    plain_number,
)

if TYPE_CHECKING:  # a plan needs none of the study's imports (optuna, scipy)
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
