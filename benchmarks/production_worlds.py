"""The economic stop rule (`--production`) in simulated worlds, against fixed trial budgets
and against no tuning, in total GPU-hours: the tuning's trials plus the production run at the
config it chose.

Worlds are the search benchmark's `layouts` family (benchmarks/search_worlds.py: each
parallel layout off the model by its own error, minor knobs' values by shared effects,
classes by biases; 128 to 512 H100s). A trial costs what `slice.cost` charges a simulated
one (90 s of launch and start-up plus 30 steps at its true step time) on every GPU. The
production run trains a fixed number of tokens: `days` at the model's first pick (no tuning:
the config the plan would give for free), shorter at a faster config.

Each world runs one guided search, as `autotune run` proposes (the model's first pick first,
refitted after each trial), up to `CAP` trials. Its arms are prefixes of that run:

- a fixed budget of k trials (4, 8, 16, 32): stops after k, or earlier where the search's
  own stop rule (`converged`) says so, as `autotune run --trials k` does;
- the economic stop: `--production`'s rule (`economics.stop_reason`, the same code, fed the
  trials' costs and the production length), or the search's own rule, or `CAP`;
- no tuning: the production run at the first pick, no trial.

    .venv/bin/python -m benchmarks.production_worlds [--worlds 30]

Writes results/bench/production_worlds.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.space import config_key
from autotune.study.record.trial_attrs import PROMISED, SOURCE, WALL
from autotune.study.search.economics import expected_share, stop_reason
from autotune.study.search.guided.search import GuidedSearch
from autotune.study.search.production import PRODUCTION, Production
from autotune.study.slice.cost import SIMULATED_STEPS, SIMULATED_TRIAL_S
from benchmarks.search_worlds import World, draw_layout_world

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results/bench/production_worlds.md"
CAP = 64
BUDGETS = (4, 8, 16, 32)
DAYS = (1, 3, 7, 14, 30, 60)
WITHIN = 0.01

optuna.logging.set_verbosity(optuna.logging.ERROR)


@dataclass(frozen=True)
class Step:
    """The search after a trial: the best true tokens/s so far, the trial's cost, and
    whether the search's own rule would stop before the next."""

    best: float
    value: float
    promised: float
    """The share of the production run the search's beliefs expected the trial to save."""
    cost_gpu_h: float
    converged: bool
    beliefs: tuple[np.ndarray, np.ndarray]


def search(world: World) -> list[Step]:
    """One guided search of up to `CAP` trials, what each step leaves."""
    s = world.space
    cal = DEFAULT_CALIBRATION[s.problem.cluster.device.generation]
    guide = GuidedSearch(s.problem, s.ranked.fastest_first, cal, seed=0)
    study = optuna.create_study(direction="maximize")
    gpus = s.problem.cluster.world_size
    tokens = s.problem.workload.tokens_per_step
    steps: list[Step] = []
    promised = 0.0
    while len(steps) < CAP:
        seen = {t.user_attrs["config_key"] for t in study.get_trials(deepcopy=False)}
        if steps:
            promised = expected_share(*steps[-1].beliefs, math.log(steps[-1].best))
        proposal = guide.propose(seen)
        row = None if proposal is None else s.ranked.table.row_of(proposal)
        if row is None:
            break
        config = s.ranked.table.config(row)
        tps = float(world.truth[row])
        wall = SIMULATED_TRIAL_S + SIMULATED_STEPS * tokens / tps
        trial = study.ask()
        for name, value in {
            "config": config.as_dict(),
            "config_key": config_key(config),
            "step_time_s": tokens / tps,
            SOURCE: "measured",
            WALL: wall,
        }.items():
            trial.set_user_attr(name, value)
        study.tell(trial, tps)
        guide.learn(study.get_trials(deepcopy=False))
        seen.add(config_key(config))
        _, expected, unc = guide.open_configs(seen)
        converged = guide.converged(seen, study.best_value) is not None
        cost = wall * gpus / 3600
        steps.append(Step(study.best_value, tps, promised, cost, converged, (expected, unc)))
    return steps


def economic_stop(world: World, steps: list[Step], days: float) -> int:
    """Trials the economic rule runs: it stops before the next trial once that does not pay."""
    s = world.space
    study = optuna.create_study(direction="maximize")
    production = Production(f"{days:g}d", hours=days * 24)
    study.set_user_attr(PRODUCTION, production.as_attr())
    tokens = s.problem.workload.tokens_per_step
    for n, step in enumerate(steps, start=1):
        wall = step.cost_gpu_h * 3600 / s.problem.cluster.world_size
        attrs = {SOURCE: "measured", WALL: wall, PROMISED: step.promised}
        study.add_trial(optuna.trial.create_trial(value=step.value, user_attrs=attrs))
        if step.converged:
            return n
        best = (step.best, 0.0)
        if stop_reason(study, s.problem.cluster, step.beliefs, best, tokens / step.best):
            return n
    return len(steps)


def total(world: World, steps: list[Step], n: int, days: float, first: float) -> float:
    """GPU-hours of `n` trials and the production run at the best of them."""
    gpus = world.space.problem.cluster.world_size
    tuning = sum(s.cost_gpu_h for s in steps[:n])
    best = steps[n - 1].best if n else first
    return tuning + days * 24 * gpus * first / best


def fixed(steps: list[Step], k: int) -> int:
    """Trials `autotune run --trials k` runs: k, or fewer where the search converged."""
    for n, step in enumerate(steps[:k], start=1):
        if step.converged:
            return n
    return min(k, len(steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=30)
    args = parser.parse_args()
    rows = []
    for seed in range(args.worlds):
        world = draw_layout_world(seed)
        steps = search(world)
        first = float(world.truth[int(world.space.ranked.order[0])])
        for days in DAYS:
            econ = economic_stop(world, steps, days)
            totals = {k: total(world, steps, fixed(steps, k), days, first) for k in BUDGETS}
            none = total(world, steps, 0, days, first)
            mine = total(world, steps, econ, days, first)
            tuning = sum(s.cost_gpu_h for s in steps[:econ])
            rows.append(
                {
                    "seed": seed, "world": world.name, "days": days, "trials": econ,
                    "vs_best_fixed": mine / min(totals.values()) - 1,
                    "best_fixed": min(totals, key=totals.__getitem__),
                    "vs_none": mine / none - 1, "tuning_share": tuning / mine,
                    "no_worse": mine - tuning <= none + 1e-9,
                }
            )  # fmt: skip
        said = [(r["days"], r["trials"], f"{r['vs_best_fixed']:+.2%}") for r in rows[-len(DAYS) :]]
        print(seed, world.name, said, flush=True)
    write(rows, args.worlds)


def write(rows: list[dict[str, Any]], worlds: int) -> None:
    n = len(rows)
    within = sum(float(r["vs_best_fixed"]) <= WITHIN for r in rows)
    no_worse = sum(bool(r["no_worse"]) for r in rows)
    lines = [
        "# The economic stop rule in simulated worlds",
        "",
        f"Simulated {datetime.now():%Y-%m-%d}: {worlds} worlds of the search benchmark's "
        f"`layouts` family, production runs of {', '.join(f'{d}' for d in DAYS)} days each "
        f"({n} pairs). Total GPU-hours: the trials plus the production run at the config "
        "chosen. Fixed budgets: 4, 8, 16, 32 trials (`--trials k`, which also stops where the "
        "search converges); no tuning: the model's first pick, unmeasured.",
        "",
        f"- The economic stop within {WITHIN:.0%} of the best fixed budget chosen in hindsight "
        f"in {within} of {n} pairs ({within / n:.0%}; goal >= 90%).",
        f"- Its production run no longer than no tuning's (never worse than no tuning by more "
        f"than its own tuning cost) in {no_worse} of {n} pairs.",
        "",
        "| days | trials: median (range) | vs best fixed budget: median, worst "
        "| vs no tuning: median | tuning's share of the total: median |",
        "| ---: | --- | --- | ---: | ---: |",
    ]
    for days in DAYS:
        mine = [r for r in rows if r["days"] == days]
        trials = [int(r["trials"]) for r in mine]
        vs = [float(r["vs_best_fixed"]) for r in mine]
        lines.append(
            f"| {days} | {statistics.median(trials):g} ({min(trials)}-{max(trials)}) | "
            f"{statistics.median(vs):+.2%}, {max(vs):+.2%} | "
            f"{statistics.median(float(r['vs_none']) for r in mine):+.2%} | "
            f"{statistics.median(float(r['tuning_share']) for r in mine):.2%} |"
        )
    lines += [
        "",
        f"Command: `.venv/bin/python -m benchmarks.production_worlds --worlds {worlds}`",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
