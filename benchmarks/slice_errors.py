"""What a slice study mismeasures, in benchmarks/slice.py's simulated worlds: for each config a
slice study measured (on the slice, or on a shallower proxy), its extrapolated tokens/s over
its true tokens/s at full size, by the job's pipeline chunks (PP·VPP), and how well the
extrapolation orders the configs (Spearman's rank correlation with the truth). A uniform
overestimate does no harm (the confirmations measure it); one that grows with a layout
knob ranks that knob's deep end first. Writes results/benchmarks/slice_extrapolation.md.

    .venv/bin/python -m benchmarks.slice_errors [--seeds 4] [--scale moderate]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from optuna.trial import TrialState
from scipy import stats

from autotune.study.record.trial_attrs import SCALE_PROBE, TrialAttrs
from autotune.study.slice.trials import RANKED_BY
from benchmarks import slice as bench

REPO = Path(__file__).resolve().parents[1]
CASES = ((1024, 8), (1024, 16), (8192, 8), (8192, 16))


@dataclass(frozen=True)
class Measured:
    """One slice study: its trials as (kind, job's PP·VPP, extrapolated / true, extrapolated,
    true), its rank correlation, its confirm-2 pick's regret against the world's best."""

    rows: list[tuple[str, int, float, float, float]]
    rho: float
    regret: float


def one_study(gpus: int, nodes: int, seed: int, scale: bench.Scale) -> Measured:
    """One slice study's trials as (kind, job's PP·VPP, extrapolated / true), its rank
    correlation and its confirm-2 pick's regret against the world's best."""
    problem = bench.world_problem(gpus)
    rng = random.Random(seed)
    biases = math.exp(rng.gauss(0, 0.1)), math.exp(rng.gauss(0, 0.3))
    world = bench.World(problem, seed, *biases, scale)
    truth = world.full_truth()
    s = bench.study(world, bench.CONVERGED_CAP, nodes)
    rows = []
    for t in s.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        kind = t.user_attrs.get(RANKED_BY)
        if kind in ("slice", "proxy") and t.value and SCALE_PROBE not in t.user_attrs:
            attrs = TrialAttrs.of(t)
            key = attrs.config_key
            assert key is not None
            chunks = attrs.config.pp * attrs.config.vpp
            rows.append((kind, chunks, t.value / truth[key], t.value, truth[key]))
    rho = stats.spearmanr([r[3] for r in rows], [r[4] for r in rows]).statistic
    picked = bench.slice_arms(s, world)[2][0]
    return Measured(rows, float(rho), 1 - truth[picked] / max(truth.values()))


def section(gpus: int, nodes: int, runs: list[Measured]) -> list[str]:
    by: dict[tuple[str, int], list[float]] = defaultdict(list)
    for run in runs:
        for kind, chunks, ratio, _, _ in run.rows:
            by[(kind, chunks)].append(ratio)
    rhos = [r.rho for r in runs]
    regrets = [r.regret for r in runs]
    lines = [
        f"### {gpus:,} GPUs ({bench.WORLDS[gpus][1]}), {nodes}-node slice, {len(runs)} seeds",
        "",
        f"Rank correlation of extrapolated with true tokens/s over a study's trials: median "
        f"{statistics.median(rhos):+.2f} (min {min(rhos):+.2f}); the confirm-2 pick's regret "
        f"against the world's best: median {statistics.median(regrets):.1%}, max "
        f"{max(regrets):.1%}.",
        "",
        "| measured as | job's PP·VPP | trials | extrapolated / true (median, min, max) |",
        "|---|---|---|---|",
    ]
    for (kind, chunks), ratios in sorted(by.items()):
        lines.append(
            f"| {kind} | {chunks} | {len(ratios)} | {statistics.median(ratios):.2f}, "
            f"{min(ratios):.2f}, {max(ratios):.2f} |"
        )
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--scale", default="moderate", choices=list(bench.SCALES))
    parser.add_argument(
        "--out", type=Path, default=REPO / "results/benchmarks/slice_extrapolation.md"
    )
    args = parser.parse_args()
    started, sections = time.monotonic(), []
    for gpus, nodes in CASES:
        scale = bench.SCALES[args.scale]
        runs = [one_study(gpus, nodes, seed, scale) for seed in range(args.seeds)]
        print(gpus, nodes, [round(r.rho, 2) for r in runs], flush=True)
        sections += section(gpus, nodes, runs)
    head = [
        "# What a slice study mismeasures (SIMULATED worlds)",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by `.venv/bin/python -m "
        f"benchmarks.slice_errors --seeds {args.seeds} --scale {args.scale}` in "
        f"{time.monotonic() - started:.0f} s on a shared 2-core machine. "
        + " ".join(__doc__.split("\n\n")[0].split()),
        "",
    ]
    args.out.write_text("\n".join(head + sections))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
