"""Do the winner's figures hold? Bias, interval coverage and false "faster" claims over
many simulated studies.

Each world's truth is the model's step time moved by what the model does not know: a
compute and a communication bias, a hidden factor per knob value (the same for every config
that sets it) and a config-dependent error; in every other world several leaders are also
made exactly equal to the best (flat-topped), where choosing on noise hurts most. Each
search trial is a launch whose level is its config's truth times exp(N(0, noise)), measured
step by step (2% jitter) under the worker's stopping rule; each repeat a launch drawn alike.
The study is the project's own (`run_study`: guided search and early stopping; then
`confirm` and `repeat_winner` as the loop runs them), the user's own config measured first,
and the figures those the summary, report, best.yaml and train.sh state
(`study.verdict.figures.winner_figures`). Per noise level and effort (the default, `--thorough`):
the bias of the winner's reported throughput against its truth, how often its 95% interval
and each ratio's (runner-up, your own config) cover the truth, and how often the winner is
called faster than your own config when it is not. Writes results/bench/figures.md.

    nice -n 10 .venv/bin/python -m benchmarks.figures [--studies 100] [--noise 0.03,0.1,0.2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import optuna

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.estimate.ranking import memory_verdicts
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig, config_key
from autotune.study.leaders import MIN_REPEATS
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import CONFIG, CONFIG_KEY, LABEL, SOURCE, TrialAttrs
from autotune.study.settings import Budget, SearchSettings
from autotune.study.trial_run import QuietProgress
from autotune.study.verdict.confirm import confirm, repeat_winner
from autotune.study.verdict.effort import STANDARD, THOROUGH
from autotune.study.verdict.figures import AFTER_CHOICE, Figures, winner_figures
from benchmarks.noisy_worlds import WITHIN, StepwiseLauncher
from benchmarks.search import World

REPO = Path(__file__).resolve().parents[1]
WORLD = ("torch", "llama3-8b", "dgx-h100:2")
SPACE = {"tp": [1, 2, 4, 8], "zero": [0, 1, 2, 3], "mbs": [1, 2, 4], "recompute": ["none", "full"]}
"""A small layout space (a few dozen valid configs), so that hundreds of studies run in
minutes; the search, stopping and confirmation are the project's own."""
HIDDEN_KNOB = 0.06
"""Spread of the hidden factor each knob value carries."""
HIDDEN_CONFIG = 0.03
"""Spread of the config-dependent error on top."""
FLAT_TOP = 4
"""In a flat world, this many configs share the best's truth."""
EFFORTS = {"default": (STANDARD, 8), "thorough": (THOROUGH, 16)}
"""Each effort with its trial budget here (`--thorough`'s 200 would be the whole space)."""
optuna.logging.set_verbosity(optuna.logging.ERROR)
STEPS = 8
"""Measured steps of a repeat."""
os.fsync = lambda fd: None  # the trial folders are temporary: no need to reach the disk
tempfile.tempdir = "/dev/shm" if Path("/dev/shm").is_dir() else None


@dataclass(frozen=True)
class YoursProblem(Problem):
    """The problem with a given config as the user's own (measured first)."""

    yours: TrainConfig | None = None

    def users_config(self) -> TrainConfig | None:
        return self.yours


def _draw(seed: int, *parts: object) -> float:
    digest = hashlib.sha256(json.dumps([seed, *map(str, parts)]).encode()).digest()
    return random.Random(digest).gauss(0.0, 1.0)


def structured_world(seed: int, flat: bool) -> tuple[World, TrainConfig]:
    """A world and the user's own config in it (half the time one of its fastest)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(json.dumps({"engine": WORLD[0], "knobs": SPACE}))
    problem = load_problem(*WORLD, f.name)
    Path(f.name).unlink()
    cal = DEFAULT_CALIBRATION[problem.cluster.device.generation]
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, cal
    )
    compute, comm = math.exp(0.1 * _draw(seed, "compute")), math.exp(0.3 * _draw(seed, "comm"))
    truth: dict[str, float | None] = {}
    configs = {}
    for e in ranked:
        s, key = e.step, config_key(e.config)
        step = (s.total_s - s.exposed_comm_s) * compute + s.exposed_comm_s * comm
        hidden = sum(_draw(seed, k, v) for k, v in e.config.as_dict().items() if k in SPACE)
        step *= math.exp(HIDDEN_KNOB * hidden + HIDDEN_CONFIG * _draw(seed, key))
        truth[key], configs[key] = problem.workload.tokens_per_step / step, e.config
    order = sorted(truth, key=lambda k: -(truth[k] or 0.0))
    if flat:
        for key in order[1:FLAT_TOP]:
            truth[key] = truth[order[0]]
    rng = random.Random(seed)
    yours = rng.choice(order[:FLAT_TOP] if rng.random() < 0.5 else order)
    world = World("structured", problem, truth, {}, lambda: StepwiseLauncher(world, 0.0, seed))
    return world, configs[yours]


@dataclass(frozen=True)
class Outcome:
    """One study's figures against the truth."""

    error: float
    """log(reported winner throughput / its truth)."""
    covered: bool
    runner_up_covered: bool | None
    yours_covered: bool | None
    false_faster: bool
    faster_claimed: bool
    after_choice: bool
    regret: float


def _covers(low: float, high: float, truth: float) -> bool:
    return low <= truth <= high


def outcome(world: World, figures: Figures, yours_key: str) -> Outcome:
    truth = world.truth
    key = TrialAttrs.of(figures.best.trial).config_key or ""
    won = truth[key] or 0.0
    half = figures.interval
    r, y = figures.runner_up, figures.yours
    runner = None
    if r is not None:
        other = truth[TrialAttrs.of(r.other.trial).config_key or ""] or 1.0
        runner = _covers(r.low, r.high, won / other)
    yours_truth = truth[yours_key] or 0.0
    return Outcome(
        error=math.log(figures.tokens_per_s / won),
        covered=_covers(figures.tokens_per_s / (1 + half), figures.tokens_per_s * (1 + half), won),
        runner_up_covered=runner,
        yours_covered=_covers(y.low, y.high, won / yours_truth) if y is not None else None,
        false_faster=y is not None and y.faster and won <= yours_truth,
        faster_claimed=y is not None and y.faster,
        after_choice=figures.method == AFTER_CHOICE,
        regret=1 - won / world.best,
    )


def run(seed: int, noise: float, effort: str, flat: bool) -> Outcome:
    """One study: the project's search (step by step, early stopping) without confirmation,
    then its confirmation and the winner's repeats after the choice, each repeat a launch
    drawn as the search's are (its steps averaged), without the trial folder."""
    world, yours = structured_world(seed, flat)
    problem = YoursProblem(**{**world.problem.__dict__, "yours": yours})
    study = optuna.create_study(direction="maximize")
    level, trials = EFFORTS[effort]
    with tempfile.TemporaryDirectory() as tmp:
        searched = run_study(
            problem,
            study,
            ref=StudyRef(name="bench", storage_url="memory", folder=Path(tmp)),
            launcher=StepwiseLauncher(world, noise, seed),
            progress=QuietProgress(),
            settings=SearchSettings(
                budget=Budget(trials=trials, effort=level, confirm=False),
                seed=seed,
                calibration=DEFAULT_CALIBRATION[problem.cluster.device.generation],
            ),
        )
    rng = random.Random(f"{seed}:repeats")

    def launch(trial: optuna.Trial, config: TrainConfig) -> None:
        key = config_key(config)
        step = problem.workload.tokens_per_step / (world.truth[key] or 1.0)
        step *= math.exp(rng.gauss(0, noise) + rng.gauss(0, WITHIN / math.sqrt(STEPS)))
        attrs = {CONFIG: config.as_dict(), CONFIG_KEY: key, SOURCE: "measured"}
        for name, value in (attrs | {"step_time_s": step, LABEL: config.label()}).items():
            trial.set_user_attr(name, value)
        study.tell(trial, problem.workload.tokens_per_step / step)

    limit = max(MIN_REPEATS, level.repeats_per_trial * searched.ran)
    confirm(study, lambda _: {}, {}, launch, limit=limit, effort=level)
    repeat_winner(study, lambda _: {}, {}, launch, level.after_choice, lambda: True)
    figures = winner_figures(study)
    assert figures is not None
    return outcome(world, figures, config_key(yours))


def _share(flags: list[bool | None]) -> str:
    known = [f for f in flags if f is not None]
    return f"{sum(known) / len(known):.0%} ({len(known)})" if known else "-"


def row(noise: float, effort: str, outcomes: list[Outcome]) -> str:
    bias = math.expm1(statistics.fmean(o.error for o in outcomes))
    return (
        f"| {noise:.0%} | {effort} | {len(outcomes)} | {bias:+.1%} "
        f"| {_share([o.covered for o in outcomes])} "
        f"| {_share([o.runner_up_covered for o in outcomes])} "
        f"| {_share([o.yours_covered for o in outcomes])} "
        f"| {_share([o.false_faster for o in outcomes])} "
        f"| {_share([o.faster_claimed for o in outcomes])} "
        f"| {_share([o.after_choice for o in outcomes])} "
        f"| {statistics.median(o.regret for o in outcomes):.1%} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=100)
    parser.add_argument("--noise", default="0.03,0.1,0.2")
    parser.add_argument("--effort", default="default,thorough")
    parser.add_argument("--jobs", type=int, default=2, help="studies run at once")
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/figures.md")
    args = parser.parse_args()
    started = time.monotonic()
    lines = []
    for noise in (float(n) for n in args.noise.split(",")):
        for effort in args.effort.split(","):
            jobs = [(s, noise, effort, s % 2 == 1) for s in range(args.studies)]
            with multiprocessing.Pool(args.jobs) as pool:
                found = pool.starmap(run, jobs)
            lines.append(row(noise, effort, found))
            print(lines[-1], f"{time.monotonic() - started:.0f} s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(lines, args, time.monotonic() - started))
    print(f"wrote {args.out}")


def report(lines: list[str], args: argparse.Namespace, took: float) -> str:
    command = (
        f"nice -n 10 .venv/bin/python -m benchmarks.figures --studies {args.studies} "
        f"--noise {args.noise} --effort {args.effort}"
    )
    return "\n".join(
        [
            "# The winner's figures over many simulated studies",
            "",
            f"Generated {datetime.now().isoformat(timespec='seconds')} by `{command}` in "
            f"{took:.0f} s. Simulated, not measured: {WORLD[1]} on {WORLD[2]} ({WORLD[0]} "
            f"engine, knobs {', '.join(SPACE)}); see the script's docstring for the worlds (every "
            f"other one flat-topped: {FLAT_TOP} configs share the best truth). 'default' is "
            "`autotune run` (8 search trials), 'thorough' `autotune run --thorough --trials "
            f"{EFFORTS['thorough'][1]}` (its repeats and contenders; fewer search trials, for "
            "time). Repeats are launches drawn as the search's trials are, without trial "
            "folders. Bias: the reported winner throughput over its truth (geometric mean, "
            "goal within +-2%); coverage: how often the 95% interval holds the truth (goal "
            "at least 90%); false faster: how often the winner is called faster than your own "
            "config (its ratio's interval above 1) when it is not (goal at most 5%); 'after "
            "choice': studies whose figures come from the winner's repeats taken after it "
            "was chosen (the rest state all its trials, so named).",
            "",
            "| noise | effort | studies | bias | winner interval covers "
            "| runner-up ratio covers | your-config ratio covers | false faster "
            "| faster claimed | after choice | regret (median) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *lines,
            "",
        ]
    )


if __name__ == "__main__":
    main()
