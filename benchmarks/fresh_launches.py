"""The default study's reported winner against fresh launches of it, as production launches
the export: the README's first command (`autotune run`: tiny workload, DeepSpeed, 2 gloo
processes), then its winner launched `--launches` times by `autotune trial` (a cold torchrun
launch each, 8 measured steps at most, as a trial measures), the whole repeated `--runs`
times. Goal (issue 39): the reported throughput within 5% of the fresh launches' median, and
that median inside the reported 95% interval. Measured, not simulated. Writes
results/bench/fresh_launches.md.

    .venv/bin/python -m benchmarks.fresh_launches [--runs 3] [--launches 4]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy
import yaml

from autotune.space import TrainConfig
from autotune.study.verdict.effort import STANDARD

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GOAL = 0.05
DRAWS = 100_000
"""Runs drawn to tell what the check scores with no bias (`unbiased_within`)."""


@dataclass(frozen=True)
class Run:
    winner: str
    reported: float
    interval: float
    """Relative half-width of the reported 95% interval."""
    wall_s: float
    fresh: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.fresh)

    @property
    def ratio(self) -> float:
        return self.reported / self.median

    @property
    def covered(self) -> bool:
        return abs(self.median / self.reported - 1) <= self.interval


def study(work: Path) -> tuple[str, float, float, float]:
    """One default study in `work`: its winner's label, reported tokens/s and interval."""
    start = time.monotonic()
    done = subprocess.run(
        [str(BIN / "autotune"), "run", "--results", str(work / "results")],
        cwd=work, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"autotune run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    best = yaml.safe_load(next((work / "results").glob("*/best/best.yaml")).read_text())
    standing = best["standing"]
    label = TrainConfig(**best["config"]).label()
    return label, standing["tokens_per_s"], standing["interval_95"], wall


def fresh_launch(work: Path, label: str, n: int) -> float:
    out = work / f"fresh-{n}"
    done = subprocess.run(
        [str(BIN / "autotune"), "trial", "--config", label, "--out", str(out)],
        cwd=work, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"autotune trial failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return float(json.loads((out / "result.json").read_text())["tokens_per_s"])


def report(runs: list[Run], command: str) -> str:
    lines = [
        "# The default study's winner against fresh launches of it",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by `{command}`: "
        + (__doc__ or "").split("\n\n")[0],
        "",
        "| run | winner | reported tok/s (95% interval) | fresh launches | their median "
        "| reported / median | median inside the interval | wall time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs):
        fresh = ", ".join(f"{v:,.0f}" for v in r.fresh)
        lines.append(
            f"| {i} | {r.winner} | {r.reported:,.0f} ±{r.interval:.1%} | {fresh} | "
            f"{r.median:,.0f} | {r.ratio:.3f} | {'yes' if r.covered else 'no'} | "
            f"{r.wall_s:.0f} s |"
        )
    within = sum(abs(r.ratio - 1) <= GOAL for r in runs)
    covered = sum(r.covered for r in runs)
    lines += [
        "",
        f"- Reported within {GOAL:.0%} of the fresh launches' median: **{within} of {len(runs)}**"
        f" runs (reported / median {min(r.ratio for r in runs):.3f} to "
        f"{max(r.ratio for r in runs):.3f}).",
        f"- The median inside the reported 95% interval: **{covered} of {len(runs)}** runs.",
        *_bias(runs),
        "- One machine shared with other work: each run's fresh launches follow its study at "
        "once, so both meet the same moment of the machine.",
        "",
    ]
    return "\n".join(lines)


def _bias(runs: list[Run]) -> list[str]:
    """The ratios' geometric mean (a bias shows there) and spread, beside how far one run's
    fresh launches differ from each other."""
    if len(runs) < 2:
        return []
    logs = [math.log(r.ratio) for r in runs]
    # Robust (1.4826 x the median absolute deviation from each run's median, in logs): one
    # stray launch, seen here at half the others' speed, would set a standard deviation.
    within = [abs(math.log(v / statistics.median(r.fresh))) for r in runs for v in r.fresh]
    launch_sd = 1.4826 * statistics.median(within)
    launches = len(runs[0].fresh)
    return [
        f"- Reported / median over the runs: geometric mean {math.exp(statistics.fmean(logs)):.3f}"
        f", spread {statistics.stdev(logs):.1%} (standard deviation of the logs); one run's "
        f"fresh launches differ from each other by {launch_sd:.1%} (a robust standard deviation, "
        f"pooled over the runs), so a {launches}-launch median is itself known to about half "
        "that.",
        f"- At that spread, a figure with no bias at all, the mean of {STANDARD.after_choice} "
        f"launches as the study's is, lands within {GOAL:.0%} of a {launches}-launch median in "
        f"{unbiased_within(launch_sd, launches):.0%} of runs (drawn, {DRAWS:,} runs): the share "
        "this machine allows the goal.",
    ]


def unbiased_within(launch_sd: float, launches: int) -> float:
    """The share of runs in which the mean of `STANDARD.after_choice` launches lies within
    `GOAL` of the median of `launches` others, launches of one config differing by
    `launch_sd` (normal in logs) and nothing else: what the check scores with no bias."""
    rng = numpy.random.default_rng(0)
    reported = rng.normal(0, launch_sd, (DRAWS, STANDARD.after_choice)).mean(axis=1)
    median = numpy.median(rng.normal(0, launch_sd, (DRAWS, launches)), axis=1)
    return float(numpy.mean(numpy.abs(numpy.expm1(reported - median)) <= GOAL))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--launches", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/fresh_launches.md")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            work = Path(tmp) / f"run-{i}"
            work.mkdir()
            label, reported, interval, wall = study(work)
            fresh = tuple(fresh_launch(work, label, n) for n in range(args.launches))
            runs.append(Run(label, reported, interval, wall, fresh))
            print(f"run {i}: {label} reported {reported:,.0f} fresh {fresh}", flush=True)
    command = f".venv/bin/python -m benchmarks.fresh_launches --runs {args.runs} " + (
        f"--launches {args.launches}"
    )
    args.out.write_text(report(runs, command))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
