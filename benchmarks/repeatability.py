"""Does the default `autotune run` name the same winner twice? Five runs from scratch, then
every winner re-measured by interleaved repeats, on this machine.

Each run is the README's first command (tiny workload, DeepSpeed, 2 gloo processes, default
budget) with its own results folder, so no run starts from another's noise estimate. A run
reports its winner's mean throughput with a 95% interval (best/best.yaml, `standing`). Two
runs agree when they name the same config, or when each winner's throughput lies inside the
other's interval. Then each distinct winner is re-measured in rounds (every winner once per
round, the order rotated), 20 measured steps each, in one warm pool: their spread across
rounds is this machine's between-trial noise, and their medians say how far apart the
winners really are. Writes results/bench/repeatability.md.

    .venv/bin/python -m benchmarks.repeatability [--runs 5] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from autotune.launchers import get_launcher
from autotune.problem import load_problem
from autotune.runner import prepare
from autotune.space import TrainConfig
from autotune.trial.spec import StepPlan

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results/bench/repeatability.md"
STUDY = "tiny-local-deepspeed"


@dataclass(frozen=True)
class Run:
    label: str
    config: TrainConfig
    tokens_per_s: float
    interval: float
    measurements: int
    wall_s: float


def default_run(results: Path) -> Run:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "run", "--results", str(results)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"autotune run failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    best = yaml.safe_load((results / STUDY / "best" / "best.yaml").read_text())
    config = TrainConfig(**best["config"])
    standing = best["standing"]
    return Run(
        config.label(),
        config,
        standing["tokens_per_s"],
        standing["interval_95"],
        standing["measurements"],
        wall,
    )


def agree(a: Run, b: Run) -> bool:
    """Same config, or each winner's throughput inside the other's 95% interval."""
    if a.label == b.label:
        return True

    def inside(x: Run, y: Run) -> bool:
        return abs(math.log(x.tokens_per_s / y.tokens_per_s)) <= math.log1p(y.interval)

    return inside(a, b) and inside(b, a)


def largest_agreeing(runs: list[Run]) -> int:
    """The most runs that all agree with each other."""
    for size in range(len(runs), 0, -1):
        for group in itertools.combinations(runs, size):
            if all(agree(a, b) for a, b in itertools.combinations(group, 2)):
                return size
    return 0


def remeasure(configs: list[TrainConfig], rounds: int, work: Path) -> dict[str, list[float]]:
    """Tokens/s of each config per round, interleaved, in one warm pool."""
    problem = load_problem("deepspeed", "tiny", "local:2")
    plan = StepPlan(measured_steps=20, precision=0.0)
    found: dict[str, list[float]] = {c.label(): [] for c in configs}
    with get_launcher("local") as launcher:
        for r in range(rounds):
            shift = r % len(configs)
            for config in configs[shift:] + configs[:shift]:
                spec = problem.trial_spec(config, plan)
                folder = work / f"remeasure-{r}-{config.label()}"
                outcome = launcher.run(prepare(spec, problem.engine, launcher, folder, 900))
                if outcome.result is None:
                    sys.exit(f"re-measuring {config.label()} failed: {outcome.error}")
                found[config.label()].append(outcome.result.tokens_per_s)
                tokens = outcome.result.tokens_per_s
                print(f"round {r} {config.label()}: {tokens:,.0f} tok/s", flush=True)
    return found


def pooled_spread(values: dict[str, list[float]]) -> float:
    squares, dof = 0.0, 0
    for v in values.values():
        logs = [math.log(x) for x in v]
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    return math.sqrt(squares / dof) if dof else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runs = []
        for i in range(args.runs):
            runs.append(default_run(work / f"run-{i}"))
            r = runs[-1]
            print(f"run {i}: {r.label} {r.tokens_per_s:,.0f} tok/s ±{r.interval:.1%}", flush=True)
        distinct = list({r.label: r.config for r in runs}.values())
        again = remeasure(distinct, args.rounds, work)
    OUT.write_text(report(runs, again, args))
    print(OUT.read_text())


def report(runs: list[Run], again: dict[str, list[float]], args: argparse.Namespace) -> str:
    medians = {label: statistics.median(v) for label, v in again.items()}
    fastest = max(medians.values())
    together = largest_agreeing(runs)
    lines = [
        "# Repeatability of the default `autotune run`",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        f"`.venv/bin/python -m benchmarks.repeatability --runs {args.runs} --rounds "
        f"{args.rounds}`: the README's first command {args.runs} times from scratch "
        "(measured, not simulated), then each winner re-measured in "
        f"{args.rounds} interleaved rounds of 20 measured steps.",
        "",
        "| run | winner | reported tok/s (95% interval) | trials behind it | wall time |",
        "|---|---|---|---|---|",
        *(
            f"| {i} | {r.label} | {r.tokens_per_s:,.0f} ±{r.interval:.1%} | "
            f"{r.measurements} | {r.wall_s:.0f} s |"
            for i, r in enumerate(runs)
        ),
        "",
        "| winner | runs that named it | re-measured tok/s per round | median | vs the fastest |",
        "|---|---|---|---|---|",
        *(
            f"| {label} | {sum(r.label == label for r in runs)} | "
            f"{', '.join(f'{v:,.0f}' for v in values)} | {medians[label]:,.0f} | "
            f"{medians[label] / fastest:.3f} |"
            for label, values in again.items()
        ),
        "",
        f"- Runs that agree (same config, or each winner inside the other's interval): "
        f"**{together} of {len(runs)}** (goal: at least 4).",
        f"- This machine's between-trial spread, from the re-measurements: "
        f"{pooled_spread(again):.1%} (standard deviation of a trial's throughput, relative).",
        f"- Wall time per run: {statistics.median(r.wall_s for r in runs):.0f} s median.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
