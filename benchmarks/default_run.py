"""The default `autotune run` (the README's first command: the tiny workload, DeepSpeed, 2 gloo
processes) at an earlier revision and at this one, side by side: wall time, trials, and both
winners re-measured by the same harness, interleaved.

The earlier revision runs from a git worktree with PYTHONPATH pointing at it, so the CLI and
every trial's worker import that revision's code (with this checkout's packages).

    .venv/bin/python -m benchmarks.default_run [--base 4b9f294] [--runs 3] [--repeats 3]

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

from benchmarks.vs_deepspeed_autotuner import span

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


def remeasure(label: str, folder: Path) -> float:
    """The config's (`_label`) median step time from one `autotune trial` of 20 measured
    steps."""
    text = label.lower()
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
    parser.add_argument("--repeats", type=int, default=3, help="re-measurements of each winner")
    parser.add_argument("--runs", type=int, default=3, help="default runs at each revision")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = work / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.base],
            cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
        codes = {f"earlier ({args.base})": base, "this revision": REPO}
        runs: dict[str, list[Run]] = {name: [] for name in codes}
        try:
            for r in range(args.runs):  # the revisions in turn, so both meet the same hours
                for i, (name, code) in enumerate(codes.items()):
                    runs[name].append(default_run(code, work / f"results-{i}-{r}"))
                    wall, n, best = runs[name][-1]
                    print(f"{name}: {wall:.0f} s, {n} trials, winner {best}", flush=True)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False
            )
        winners = list(dict.fromkeys(_label(best) for each in runs.values() for *_, best in each))
        times: dict[str, list[float]] = {label: [] for label in winners}
        for repeat in range(args.repeats):
            for i, label in enumerate(winners):
                times[label].append(remeasure(label, work / f"remeasure-{i}-{repeat}"))
    write(runs, times, args)


Run = tuple[float, int, dict[str, object]]


def _label(best: dict[str, object]) -> str:
    return ",".join(f"{k}={v}" for k, v in best.items())


def write(
    runs: dict[str, list[Run]], times: dict[str, list[float]], args: argparse.Namespace
) -> None:
    med = {label: statistics.median(t) for label, t in times.items()}
    base_name = next(iter(runs))
    base_wall = statistics.median([wall for wall, _, _ in runs[base_name]])
    rows = [
        "| revision | wall time | trials | winner (runs) |",
        "|---|---|---|---|",
    ]
    for name, each in runs.items():
        walls = [wall for wall, _, _ in each]
        labels = [_label(best) for *_, best in each]
        winners = "; ".join(
            f"{w} ({labels.count(w)} of {len(labels)})" for w in dict.fromkeys(labels)
        )
        rows.append(
            f"| {name} | {span(walls, '{:.0f}')} s ({statistics.median(walls) / base_wall:.2f}x) "
            f"| {span([float(n) for _, n, _ in each], '{:.0f}')} | {winners} |"
        )
    remeasured = [
        "| winner | re-measured step time (median, min-max) |",
        "|---|---|",
        *(
            f"| {label} | {med[label] * 1000:.1f} ms ({min(t) * 1000:.1f}-{max(t) * 1000:.1f}) |"
            for label, t in times.items()
        ),
    ]
    head = "this revision"
    head_wall = statistics.median([wall for wall, _, _ in runs[head]])
    text = "\n".join(
        [
            "# The default `autotune run`, before and after",
            "",
            f"Generated {datetime.now().isoformat(timespec='seconds')} by "
            f"`.venv/bin/python -m benchmarks.default_run --base {args.base} --runs "
            f"{args.runs} --repeats {args.repeats}`: the README's first command (tiny "
            "workload, DeepSpeed, 2 gloo processes, default budget) at each revision, "
            f"{args.runs} runs each (the revisions in turn), then every winner re-measured by "
            f"`autotune trial` with 20 measured steps, interleaved, {args.repeats} times each. "
            "Ranges are the least and most over the runs; the ratio is of median wall times. "
            "Measured, not simulated.",
            "",
            *rows,
            "",
            *remeasured,
            "",
            f"- Wall time: {head_wall / base_wall:.2f}x the earlier revision's (medians).",
            "- On this noisy machine one config's step time differs by up to about 20% from one "
            "launch to the next: winners whose min-max ranges overlap are not known apart.",
            "",
        ]
    )
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
