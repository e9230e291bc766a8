"""Do the study's verdicts hold when launches of one config differ by 0, 5, 10 or 20%?

Simulated worlds (benchmarks/search.py: the model's prediction moved by a seeded,
config-dependent error and a compute/communication bias, so the search's model is not the
truth), measured step by step: each trial draws its launch's level (the config's truth times
exp(N(0, noise)), afresh per trial) and then step times around it (2% jitter), and measures
them under the worker's own rule (`trial.length.stopped_for`, with the step time to beat and
the margin the study hands the trial), so early stopping acts as in a real trial. The study is
the default one (guided search, confirmation of leaders by interleaved repeats), with 8
search trials and with the search run until it has converged.

Per noise level, over the seeds: how often the winner's true throughput is within 2% of the
world's best, as the study names it (its standing: the mean over the trial and repeats) and
as the best single trial would (no confirmation: one launch per config); how
often the world's best config, run by the search, had a trial stopped early as slower, with
the study's noise-aware margin (`noise.early_stop_margin`) and, on the same step draws, with
a fixed 10% margin; and the trials each verdict costs. Each with the default budget (8 search
trials) and with none (`--trials 0`: the search runs until it has converged), so that what a
guarantee costs stands beside what the default spends; with --thorough, also the effort of
`autotune run --thorough` (study/verdict/effort.py), whose settings are tuned on seeds 0-39, so
--first-seed 40 reports it on seeds it is not tuned on. Writes results/bench/noisy_worlds.md.

    .venv/bin/python -m benchmarks.noisy_worlds [--seeds 20] [--first-seed 0]
        [--noise 0,0.05,0.1,0.2] [--trials 8,0] [--thorough]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import optuna

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.space import config_key
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.study.settings import Budget, SearchSettings
from autotune.study.trial_run import QuietProgress
from autotune.study.verdict.confirm import Standing
from autotune.study.verdict.effort import STANDARD, THOROUGH, THOROUGH_TRIALS, Effort
from autotune.study.verdict.winner import decide
from autotune.trial.length import stopped_for
from autotune.trial.result import TrialResult
from autotune.trial.spec import TRIAL_FILE, TrialSpec
from benchmarks.search import World, simulated_world

REPO = Path(__file__).resolve().parents[1]
WORLD = ("torch", "llama3-8b", "dgx-h100:4")
WITHIN = 0.02
"""Jitter of one step around its launch's level."""
FIXED_MARGIN = 0.10
"""A fixed early-stopping margin that ignores the between-trial noise, for comparison."""
WARMUP_STEPS = 5
OVERHEAD_S = 90.0
"""Launch, imports and initialisation of a real large-model trial (as benchmarks/search.py)."""
EFFORTS = {"standard": STANDARD, "thorough": THOROUGH}
optuna.logging.set_verbosity(optuna.logging.ERROR)


@dataclass
class StepwiseLauncher(Launcher):
    """A noisy world measured step by step under the worker's stopping rule."""

    world: World
    noise: float
    seed: int
    stopped: dict[str, list[tuple[str | None, str | None]]] = field(default_factory=dict)
    """Per config: (why its trial stopped, why it would have with the fixed margin)."""
    seconds: float = 0.0

    name = "stepwise"
    source = "measured"

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "simulated world, measured step by step"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        key = config_key(spec.config)
        truth = self.world.truth.get(key)
        if not truth:
            return LaunchOutcome(kind="oom", error="simulated out of memory", wall_s=OVERHEAD_S)
        rng = random.Random(f"{self.seed}:{request.folder.name}:{key}")
        level = spec.workload.tokens_per_step / truth * math.exp(rng.gauss(0.0, self.noise))
        plan = spec.steps
        fixed = replace(plan, margin=FIXED_MARGIN) if plan.margin is not None else plan
        steps: list[float] = []
        why = would = None
        while why is None:
            steps.append(level * math.exp(rng.gauss(0.0, WITHIN)))
            why = stopped_for(steps, plan)
            would = would or stopped_for(steps, fixed)
        self.stopped.setdefault(key, []).append((why, would))
        step = statistics.fmean(steps)
        wall = OVERHEAD_S + (WARMUP_STEPS + len(steps)) * step
        self.seconds += wall
        result = TrialResult(
            source="measured",
            step_time_s=step,
            tokens_per_s=spec.workload.tokens_per_step / step,
            tflops_per_device=0.0,
            mfu=None,
            step_time_stdev_s=statistics.stdev(steps),
            step_times_s=tuple(steps),
            measured_steps=len(steps),
            stopped_for=why,
        )
        result.write(request.folder)
        return LaunchOutcome(kind="ok", error=None, wall_s=wall, result=result)


@dataclass(frozen=True)
class Outcome:
    """One seed's study in one noisy world."""

    regret: float
    """1 - the named winner's true throughput / the world's best."""
    regret_single: float
    """The same for the best single trial of the search (no confirmation)."""
    best_ran: bool
    best_stopped: bool
    """The world's best config had a trial stopped early as slower."""
    best_stopped_fixed: bool
    """... or would have, with the fixed 10% margin, on the same step draws."""
    search_trials: int
    repeats: int
    seconds: float
    seconds_search: float


def run(
    world: World, noise: float, seed: int, trials: int | None, effort: Effort = STANDARD
) -> Outcome:
    launcher = StepwiseLauncher(world, noise, seed)
    study = optuna.create_study(direction="maximize")
    with tempfile.TemporaryDirectory() as tmp:
        run_study(
            world.problem,
            study,
            ref=StudyRef(name="bench", storage_url="memory", folder=Path(tmp)),
            launcher=launcher,
            progress=QuietProgress(),
            settings=SearchSettings(
                budget=Budget(trials=trials, effort=effort),
                seed=seed,
                calibration=DEFAULT_CALIBRATION[world.problem.cluster.device.generation],
            ),
        )
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    search = [t for t in done if TrialAttrs.of(t).confirms is None and t.value]
    repeats = [t for t in done if TrialAttrs.of(t).confirms is not None]
    standing = _winner(study)
    assert standing is not None
    named = TrialAttrs.of(standing.trial).config_key
    single = TrialAttrs.of(max(search, key=lambda t: t.value or 0.0)).config_key
    assert named is not None and single is not None  # search trials name their configs
    best_key = max(world.truth, key=lambda k: world.truth[k] or 0.0)
    best_trials = launcher.stopped.get(best_key, [])
    per_trial = launcher.seconds / max(1, len(done))
    return Outcome(
        regret=1 - (world.truth[named] or 0.0) / world.best,
        regret_single=1 - (world.truth[single] or 0.0) / world.best,
        best_ran=bool(best_trials),
        best_stopped=any(why == "slower" for why, _ in best_trials),
        best_stopped_fixed=any(would == "slower" for _, would in best_trials),
        search_trials=len(search),
        repeats=len(repeats),
        seconds=launcher.seconds,
        seconds_search=launcher.seconds - per_trial * len(repeats),
    )


def _share(flags: list[bool]) -> str:
    return f"{sum(flags)} of {len(flags)} ({sum(flags) / len(flags):.0%})"


def _budget(trials: int | None, effort: str) -> str:
    if effort == "thorough":
        return f"thorough (at most {trials} trials)"
    return f"{trials} trials" if trials else "until converged"


@dataclass(frozen=True)
class Row:
    noise: float
    trials: int | None
    effort: str
    outcomes: list[Outcome]

    @property
    def budget(self) -> str:
        return _budget(self.trials, self.effort)


def budgets(args: argparse.Namespace) -> list[tuple[int | None, str]]:
    """The default effort at each --trials budget; the thorough one as `autotune run
    --thorough` runs it (its default budget, `THOROUGH_TRIALS`)."""
    standard = [(max(0, int(t)) or None, "standard") for t in args.trials.split(",")]
    return standard + ([(THOROUGH_TRIALS, "thorough")] if args.thorough else [])


def report(rows: list[Row], args: argparse.Namespace, took: float) -> str:
    lines = [
        "# Verdicts in noisy worlds",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by `.venv/bin/python -m "
        f"benchmarks.noisy_worlds --seeds {args.seeds} --first-seed {args.first_seed} "
        f"--noise {args.noise} --trials {args.trials}{' --thorough' * args.thorough}` in "
        f"{took:.0f} s. Simulated, not measured: the {WORLD[1]} on {WORLD[2]} world of "
        f"benchmarks/search.py ({WORLD[0]} engine, its truth the model moved by a seeded "
        "config-dependent error and a compute/communication bias), each trial a launch whose "
        f"level is its config's truth times exp(N(0, noise)), measured step by step ({WITHIN:.0%} "
        "jitter) under the worker's stopping rule. The default study (guided search, leaders "
        "confirmed by interleaved repeats) with its default budget of 8 search trials, and "
        "with no trial budget: the search then stops when it has converged (no config left "
        "that its model says could beat the best). "
        + (
            "'thorough' is `autotune run --thorough` (study/verdict/effort.py: the search stops "
            "once the expected number of configs left that beat the best by 2% is at most "
            f"{THOROUGH.stop_risk}, and up to {THOROUGH.contenders} leaders are repeated up "
            f"to {THOROUGH.repeats} times each, {THOROUGH.repeats_per_trial} repeats per "
            f"search trial at most; the default: {STANDARD.contenders}, {STANDARD.repeats}, "
            f"{STANDARD.repeats_per_trial}). Its settings were chosen on seeds 0-39. "
            if args.thorough
            else ""
        )
        + "'Named' is the study's winner "
        "(mean over its trial and repeats); 'single trial' the best single search trial, "
        "what autotune named before confirmation. Early stopping: the world's best config "
        "had a trial stopped as slower, with the study's noise-aware margin and, on the same "
        f"step draws, with a fixed {FIXED_MARGIN:.0%} margin (counted over the seeds whose "
        "search ran it). Trial-seconds charge "
        f"{OVERHEAD_S:.0f} s + {WARMUP_STEPS} warm-up steps + the measured steps per trial.",
        "",
        "| noise | search budget | seeds | named within 2% | single trial within 2% "
        "| regret named (median, max) | best config ran | best stopped early "
        "| with a fixed 10% margin | search trials "
        "| repeats (median) | trial-seconds (median): with repeats / search only |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        outcomes = row.outcomes
        ran = [o for o in outcomes if o.best_ran]
        lines.append(
            f"| {row.noise:.0%} | {row.budget} | {len(outcomes)} "
            f"| {_share([o.regret <= 0.02 for o in outcomes])} "
            f"| {_share([o.regret_single <= 0.02 for o in outcomes])} "
            f"| {statistics.median(o.regret for o in outcomes):.1%}, "
            f"{max(o.regret for o in outcomes):.1%} "
            f"| {len(ran)} of {len(outcomes)} "
            f"| {_share([o.best_stopped for o in ran]) if ran else '-'} "
            f"| {_share([o.best_stopped_fixed for o in ran]) if ran else '-'} "
            f"| {statistics.median(o.search_trials for o in outcomes):g} "
            f"| {statistics.median(o.repeats for o in outcomes):g} "
            f"| {statistics.median(o.seconds for o in outcomes):,.0f} / "
            f"{statistics.median(o.seconds_search for o in outcomes):,.0f} |"
        )
    for row in rows:
        if not math.isclose(row.noise, 0.10):
            continue
        ten = row.outcomes
        named = sum(o.regret <= 0.02 for o in ten) / len(ten)
        ran = [o for o in ten if o.best_ran]
        stopped = sum(o.best_stopped for o in ran) / len(ran) if ran else 0.0
        lines += [
            "",
            f"Goals at 10% noise, {row.budget}: the winner within 2% of the best in at "
            f"least 90% of seeds: {named:.0%}, {'met' if named >= 0.9 else 'not met'}; the "
            f"true best stopped early in at most 5%: {stopped:.0%}, "
            f"{'met' if stopped <= 0.05 else 'not met'}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", default="0,0.05,0.1,0.2")
    parser.add_argument(
        "--trials", default="8,0", help="search budgets to compare; 0: until converged"
    )
    parser.add_argument(
        "--thorough", action="store_true", help="also run `autotune run --thorough`'s effort"
    )
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/noisy_worlds.md")
    args = parser.parse_args()
    started = time.monotonic()
    rows: list[Row] = []
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for noise in (float(n) for n in args.noise.split(",")):
        for trials, effort in budgets(args):
            outcomes = [
                run(simulated_world(*WORLD, seed=seed), noise, seed, trials, EFFORTS[effort])
                for seed in seeds
            ]
            row = Row(noise, trials, effort, outcomes)
            rows.append(row)
            print(noise, row.budget, [round(o.regret, 3) for o in outcomes], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, args, time.monotonic() - started))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()


def _winner(study: optuna.Study) -> Standing | None:
    """The study's winner, as its verdict names it."""
    verdict = decide(study)
    return verdict.winner if verdict is not None else None
