"""Collectives on this machine's gloo backend (two processes, 1 KiB to 256 MiB) against a
plain memory copy timed in the same run; writes results/bench/commbench_gloo.md.

    .venv/bin/python -m benchmarks.commbench
"""

from __future__ import annotations

from pathlib import Path

from autotune.commbench.bench import OPS, parse_sizes, run_commbench
from autotune.specs import load_cluster

OUT = Path(__file__).resolve().parents[1] / "results" / "bench" / "commbench_gloo.md"


def main() -> None:
    report = run_commbench(
        load_cluster("local:2"), list(OPS), parse_sizes("1K:256M"), Path("results/commbench")
    )
    rows = report["rows"]
    memcpy = report["memcpy_gbps"]
    lines = [
        "# commbench on gloo, 2 processes (measured)",
        "",
        "Made by `benchmarks/commbench.py` (`autotune commbench --cluster local:2`). "
        "busbw follows nccl-tests. The memory copy is one `copy_` of the largest message on "
        f"rank 0 in the same run: **{memcpy:.2f} GB/s**.",
        "",
        "| op | size | time | algbw GB/s | busbw GB/s | busbw / memcpy | correct |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["bytes"] in (2**10, 2**16, 2**20, 2**24, 2**28):
            lines.append(
                f"| {r['op']} | {r['bytes'] / 2**10:,.0f} KiB | {r['time_s'] * 1e3:.3f} ms | "
                f"{r['algbw_gbps']:.3f} | {r['busbw_gbps']:.3f} | "
                f"{r['busbw_gbps'] / memcpy:.3f} | {r['correct']} |"
            )
    lines += ["", f"Every row of every size was checked: {all(r['correct'] for r in rows)}."]
    OUT.write_text("\n".join(lines) + "\n")
    print(OUT.read_text())


if __name__ == "__main__":
    main()
