"""The economic stop rule on this machine: the default `autotune run` (the tiny workload,
DeepSpeed, 2 gloo processes) tuned for production runs of several lengths, each from
scratch, interleaved: the trials it ran, why it stopped, and what the summary says tuning
cost.

    .venv/bin/python -m benchmarks.production_stop [--production 10m 2h 30d] [--runs 1]

Writes results/bench/production_stop.md. Runs for several minutes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results/bench/production_stop.md"


def tuned_for(production: str, results: Path) -> dict[str, object]:
    """One study for `production`: its trials, stop line, cost line and wall time."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "run", "--results", str(results), "--production",
         production],
        cwd=REPO, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"autotune run --production {production} failed:\n{done.stderr[-3000:]}")
    lines = done.stdout.splitlines()
    stop = next(line for line in lines if line.startswith("stopped: "))
    cost = next(line for line in lines if line.startswith("tuning cost "))
    trials = len(list((results / "tiny-local-deepspeed" / "trials").iterdir()))
    return {"production": production, "trials": trials, "stop": stop, "cost": cost, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--production", nargs="+", default=["10m", "2h", "30d"])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for run in range(args.runs):
        for production in args.production:
            with tempfile.TemporaryDirectory() as results:
                row = tuned_for(production, Path(results))
            print(run, row, flush=True)
            rows.append({"run": run + 1, **row})
    table = [
        "| run | --production | trials | wall | stopped | tuning cost |",
        "| ---: | --- | ---: | ---: | --- | --- |",
        *(
            f"| {r['run']} | {r['production']} | {r['trials']} | {r['wall']:.0f} s | "
            f"{str(r['stop']).removeprefix('stopped: ')} | "
            f"{str(r['cost']).removeprefix('tuning cost ')} |"
            for r in rows
        ),
    ]
    OUT.write_text(
        "\n".join(
            [
                "# The economic stop rule on this machine",
                "",
                f"Measured {datetime.now():%Y-%m-%d} on 2 gloo processes of a shared 2-core "
                "machine: the default `autotune run` (tiny workload, DeepSpeed), tuned from "
                f"scratch for each production run, {args.runs} run(s) each, interleaved. "
                "Trials count every trial folder (the search's, its repeats and the "
                "winner's). GPU-hours here are CPU-core-hours (2 devices).",
                "",
                *table,
                "",
                f"Command: `.venv/bin/python -m benchmarks.production_stop --production "
                f"{' '.join(args.production)} --runs {args.runs}`",
                "",
            ]
        )
    )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
