"""The collective model against published all-reduce plateaus and small-message latencies.

Writes results/bench/collective_model.md. Rows: shared research comm_cost_model.md §4.

    .venv/bin/python scripts/validate_collectives.py
"""

from __future__ import annotations

from pathlib import Path

from autotune.estimate.collectives import bus_bandwidth, collective_time
from autotune.estimate.published_collectives import LATENCIES, PLATEAUS, Measured

OUT = Path(__file__).resolve().parents[1] / "results/bench/collective_model.md"


def predicted(m: Measured) -> tuple[float, str]:
    t, choice = collective_time("all_reduce", m.size_bytes, m.ranks, m.nodes, m.fabric, m.algo)
    value = bus_bandwidth("all_reduce", m.size_bytes, t, m.ranks) if m.busbw_gbps else t * 1e6
    return value, f"{choice.algo}/{choice.proto}"


def main() -> None:
    lines = [
        "# Collective model against published NCCL measurements",
        "",
        "Made by `.venv/bin/python scripts/validate_collectives.py`; rows from "
        "comm_cost_model.md §4. All-reduce; model = NCCL's tuning model (v2.30 "
        "constants) with the derived graph presets.",
        "",
        "| row | system | size | measured | model | model's choice | error | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in PLATEAUS + LATENCIES:
        value, choice = predicted(m)
        measured = m.busbw_gbps or m.latency_us
        assert measured, m.row  # each row states one or the other
        unit = "GB/s busbw" if m.busbw_gbps else "us"
        error = value / measured - 1
        lines.append(
            f"| {m.row} | {m.system} | {m.size_bytes:,} B | {measured:g} {unit} | "
            f"{value:.1f} | {choice} | {error:+.1%} | {m.note} |"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(OUT.read_text())


if __name__ == "__main__":
    main()
