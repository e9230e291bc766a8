"""The default `autotune run` (the README's first command: the tiny workload, DeepSpeed, 2 gloo
processes) at an earlier revision and at this one, side by side: wall time, trials, and both
winners re-measured by the same harness, interleaved.

The earlier revision runs from a git worktree with PYTHONPATH pointing at it, so the CLI and
every trial's worker import that revision's code (with this checkout's packages).

    .venv/bin/python scripts/bench_default_run.py [--base 4b9f294] [--repeats 3]

Writes results/bench/default_run.md. Runs for several minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results/bench/default_run.md"
KNOBS = ("zero", "mbs", "reduce_bucket", "allgather_bucket", "overlap_comm")


def autotune(code: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def default_run(code: Path, results: Path) -> tuple[float, int, dict[str, object]]:
    """Wall time, trials run (confirmations included) and the winner's knobs."""
    start = time.monotonic()
    done = autotune(code, "run", "--results", str(results))
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"autotune run at {code} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    study = results / "tiny-local-deepspeed"
    best = yaml.safe_load((study / "best" / "best.yaml").read_text())["config"]
    trials = len(list((study / "trials").iterdir()))
    return wall, trials, {k: best[k] for k in KNOBS}


def remeasure(config: dict[str, object], folder: Path) -> float:
    """The config's median step time from one `autotune trial` of 20 measured steps."""
    text = ",".join(f"{k}={str(v).lower()}" for k, v in config.items())
    done = autotune(
        REPO, "trial", "--config", text, "--measured-steps", "20", "--precision", "0",
        "--out", str(folder), "--json",
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"re-measuring {text} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return float(json.loads(done.stdout)["result"]["step_time_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="4b9f294", help="the earlier revision")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = work / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.base],
            cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
        try:
            runs = {
                f"earlier ({args.base})": default_run(base, work / "results-base"),
                "this revision": default_run(REPO, work / "results-head"),
            }
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False
            )
        for name, (wall, n, best) in runs.items():
            print(f"{name}: {wall:.0f} s, {n} trials, winner {best}", flush=True)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for repeat in range(args.repeats):
            for i, (name, (_, _, best)) in enumerate(runs.items()):
                times[name].append(remeasure(best, work / f"remeasure-{i}-{repeat}"))
    write(runs, times, args)


def write(runs: dict, times: dict[str, list[float]], args: argparse.Namespace) -> None:
    med = {name: statistics.median(t) for name, t in times.items()}
    (base_name, (base_wall, _, _)), _ = runs.items()
    rows = [
        "| revision | wall time | trials | winner | re-measured step time (median, min-max) |",
        "|---|---|---|---|---|",
    ]
    for name, (wall, n, best) in runs.items():
        label = ",".join(f"{k}={v}" for k, v in best.items())
        t = times[name]
        rows.append(
            f"| {name} | {wall:.0f} s ({wall / base_wall:.2f}x) | {n} | {label} | "
            f"{med[name] * 1000:.1f} ms ({min(t) * 1000:.1f}-{max(t) * 1000:.1f}) |"
        )
    head = "this revision"
    text = "\n".join(
        [
            "# The default `autotune run`, before and after",
            "",
            f"Generated {datetime.now().isoformat(timespec='seconds')} by "
            f"`.venv/bin/python scripts/bench_default_run.py --base {args.base} --repeats "
            f"{args.repeats}`: the README's first command (tiny workload, DeepSpeed, 2 gloo "
            "processes, default budget) at each revision, one run each, then both winners "
            f"re-measured by `autotune trial` with 20 measured steps, interleaved, "
            f"{args.repeats} times each. Measured, not simulated.",
            "",
            *rows,
            "",
            f"- Wall time: {runs[head][0] / base_wall:.2f}x the earlier revision's "
            "(goal: at most 0.5x).",
            f"- The winner of this revision runs at {med[base_name] / med[head]:.2f}x the "
            "speed of the earlier one's (ratio of median step times; above 1 is faster). One "
            "run of each tuner on a noisy machine: the min-max ranges say whether the winners "
            "are apart.",
            "",
        ]
    )
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
