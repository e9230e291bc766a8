"""How long `autotune plan` takes on large spaces (enumerate, check rules, predict, rank).

Writes results/bench/plan_speed.md. Times are in-process (after imports), best of 3, plus one
end-to-end run of the command (with Python start-up and imports).

    .venv/bin/python scripts/bench_plan.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from autotune.estimate.ranking import memory_verdicts
from autotune.estimate.steptime import DEFAULT_CALIBRATION
from autotune.problem import load_problem

REPO = Path(__file__).resolve().parents[1]
CASES = [
    ("torch", "llama3-70b", "dgx-h100:128"),
    ("deepspeed", "llama3-70b", "dgx-h100:128"),
    ("torch", "gpt3-175b", "dgx-a100:64"),
    ("torch", "llama3-8b", "dgx-h100:4"),
]


def timed(engine: str, model: str, cluster: str) -> tuple[float, int, int, int]:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        problem = load_problem(engine, model, cluster)
        found = problem.enumerate()
        cal = DEFAULT_CALIBRATION[problem.cluster.device.generation]
        ranked, _ = memory_verdicts(problem, found.valid, cal)
        best = min(best, time.perf_counter() - start)
    return best, found.total, len(found.valid), len(ranked)


def main() -> None:
    lines = [
        "# plan speed",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        "`.venv/bin/python scripts/bench_plan.py` on this machine (2 cores).",
        "",
        "| engine | model | cluster | configs | valid | fit | in-process s | command s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for engine, model, cluster in CASES:
        seconds, total, valid, ranked = timed(engine, model, cluster)
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "autotune",
                "plan",
                "--engine",
                engine,
                "--model",
                model,
                "--cluster",
                cluster,
                "--json",
            ],
            check=True,
            cwd=REPO,
            capture_output=True,
        )
        command = time.perf_counter() - start
        lines.append(
            f"| {engine} | {model} | {cluster} | {total} | {valid} | {ranked} | "
            f"{seconds:.2f} | {command:.2f} |"
        )
        print(lines[-1], flush=True)
    out = REPO / "results/bench/plan_speed.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
