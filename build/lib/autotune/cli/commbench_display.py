"""Rich output for commbench: its collectives table, the NCCL sweep's fastest settings, and
the collective fits `calibrate --commbench` makes from a report. Formatting only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from autotune.units import human_bytes

if TYPE_CHECKING:  # pandas only where a sweep is shown
    import pandas as pd

    from autotune.calibration.from_commbench import CommCalibrationReport


def commbench_calibration(console: Console, report: CommCalibrationReport) -> None:
    table = Table(
        "op", "link", "ranks", "NCCL", "regimes: latency + bus bytes / busbw", "median error",
        title=f"collective times fitted for {report.cluster} (each size takes its fastest "
        "regime)",
        title_justify="left",
    )  # fmt: skip
    for f in report.fits:
        table.add_row(
            f.op,
            f.link,
            str(f.ranks),
            "default" if f.algo == "default" else f"{f.algo}/{f.proto}",
            "; ".join(
                f"{r.latency_s * 1e6:,.1f} us + B / {r.busbw_bytes_per_s / 1e9:.3f} GB/s"
                for r in f.regimes
            ),
            f"{f.median_error:.1%}",
        )
    console.print(table)
    console.print(f"saved: {report.saved_to} (estimate, plan and run use it for this cluster)")


def _sweep_table(winners: pd.DataFrame, nccl_version: str | None) -> Table:
    table = Table(
        title=f"NCCL sweep (NCCL {nccl_version}): fastest forced setting per size (measured)",
        title_justify="left",
    )
    for column in ("op", "group", "bytes", "fastest", "time", "default", "vs default"):
        table.add_column(
            column, justify="left" if column in ("op", "group", "fastest") else "right"
        )
    for w in winners.itertuples():
        table.add_row(
            w.op,
            w.group,
            human_bytes(w.bytes),
            f"{w.algo}/{w.proto}",
            f"{w.time_s * 1e6:,.1f} us",
            f"{w.default_s * 1e6:,.1f} us",
            f"{w.vs_default:.2f}x",
        )
    return table


def commbench(console: Console, report: dict[str, Any]) -> None:
    """The collectives table, and large-message busbw against the memory copy."""
    table = Table(
        title=f"commbench: {report['backend']}, {report['ranks']} ranks (measured)",
        title_justify="left",
    )
    for column in ("op", "group", "NCCL", "bytes", "time", "algbw GB/s", "busbw GB/s", "correct"):
        table.add_column(column, justify="right" if column in ("bytes", "time") else "left")
    for r in report["rows"]:
        table.add_row(
            r["op"],
            f"{r['group']} ({r['ranks']})",
            "default" if r["algo"] == "default" else f"{r['algo']}/{r['proto']}",
            human_bytes(r["bytes"]),
            f"{r['time_s'] * 1e6:,.1f} us",
            *(
                (f"{r['algbw_gbps']:.3f}", f"{r['busbw_gbps']:.3f}")
                if r["algbw_gbps"] is not None
                else ("no data moved", "no data moved")
            ),
            "yes" if r["correct"] else "[red]NO[/]",
        )
    console.print(table)
    from autotune.commbench.bench import sweep_winners

    winners = sweep_winners(report)
    if not winners.empty:
        console.print(_sweep_table(winners, report.get("nccl_version")))
    for r in report.get("refused", []):
        console.print(
            f"NCCL refused {r['op']} ({r['group']}) with NCCL_ALGO={r.get('NCCL_ALGO')} "
            f"NCCL_PROTO={r.get('NCCL_PROTO')}: {r['error']}"
        )
    if report["ranks"] == 1:
        console.print(
            "one rank: no link is crossed, so times are NCCL's launch and local copies, and "
            "no bandwidth or NCCL setting is reported as faster; this exercises the NCCL path, "
            "not the fabric"
        )
    memcpy = report["memcpy_gbps"]
    largest = max(r["bytes"] for r in report["rows"])
    for r in report["rows"]:
        if r["bytes"] == largest and r["algo"] == "default" and r["busbw_gbps"] is not None:
            console.print(
                f"{r['op']} at {human_bytes(largest)}: busbw {r['busbw_gbps']:.2f} GB/s = "
                f"{r['busbw_gbps'] / memcpy:.2f}x a memory copy ({memcpy:.2f} GB/s, same run)"
            )
    console.print(f"files: {report['folder']}")
