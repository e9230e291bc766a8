"""Search over a family of worlds the model misjudges in structured ways (issue 41).

Each world is a derived space of 10,000 to 115,000 configs that fit (Megatron and torch,
16 to 128 dgx-h100 nodes), whose truth is the model's prediction (default calibration) times
exp(error), the error drawn once per world from its seed, with these parameters, fixed
before the search was tuned:

- class-wide biases: `BIASED_VALUES` values of the structural knobs (`STRUCTURAL`), drawn
  among the values the model's `LEADERS` best configs take (the classes a search is drawn
  to), each uniform in +-`CLASS_BIAS`, shared by every config with that value;
- an interaction: one value pair of two structural knobs drawn the same way, uniform in
  +-`INTERACTION`;
- a parallel-layout error (tp, pp, vpp, cp), normal with spread `LAYOUT_ERROR`;
- a per-config error (the config less NCCL settings), normal with spread `CONFIG_ERROR`.

Every strategy has the same budget of search trials, replayed against the truth with no
noise: the default guided search (GuidedSearch, refitted after each trial, stopping on its
own rule as `autotune run` does), Optuna's TPE and GP samplers and random sampling as
`autotune run --strategy` runs them (the plan's best three first, proposals that break a
rule or do not fit pruned at no cost, a random untried config after 25 such in a row).
Regret: 1 - the best true throughput found / the world's best. Guided "wins" a world against
another strategy when its regret after 12 trials is lower by more than 0.1%, or, the regrets
tied, when it reached its best of those 12 in fewer trials. Writes
results/bench/search_worlds.md (seeds 0-29, on which the search was tuned) or, with another
--first-seed, results/bench/search_worlds_check.md.

Optuna's samplers do not depend on autotune's search, and GP takes minutes a world (each of
up to 25 rejected proposals a trial is an ask that fits a GP and optimises its acquisition
over ~20 categorical knobs): each sampler's runs are kept per world in
results/bench/search_worlds_runs/<strategy>.json and reused while the world's draw, size and
Optuna's version are the same (`--rerun` runs them afresh). GP's asks run without Optuna's
`torch.device("cpu")` guard, which only redirects a default device this CPU-only torch does
not have and doubles the ask's time in torch's Python dispatch (same proposals, checked).

    .venv/bin/python -m benchmarks.search_worlds [--worlds 30] [--first-seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.estimate.predict import Predictor
from autotune.estimate.ranking import Ranked, memory_verdicts
from autotune.problem import Problem, load_problem
from autotune.space import config_key
from autotune.space.config import KNOBS
from autotune.space.table import NCCL_KNOBS
from autotune.study.choices import StudySpace
from autotune.study.search.guided.search import GuidedSearch
from autotune.study.search.samplers import make_sampler

REPO = Path(__file__).resolve().parents[1]
SPACES = (
    ("torch", "llama3-8b", 16),
    ("megatron", "gpt3-175b", 16),
    ("torch", "gpt3-175b", 64),
    ("torch", "llama3-8b", 32),
    ("megatron", "llama3-70b", 128),
    ("torch", "gpt3-175b", 128),
    ("torch", "llama3-8b", 64),
)
STRUCTURAL = ("tp", "pp", "vpp", "cp", "zero", "hsdp", "recompute", "sp", "overlap_comm")
BIASED_VALUES = 3
LEADERS = 100
CLASS_BIAS = 0.12
INTERACTION = 0.08
LAYOUT_ERROR = 0.08
CONFIG_ERROR = 0.02
BUDGET = 20
REGRET_AT = (12, 20)
WITHIN = 0.03
MISSES = 25
SEEDS_FROM_PLAN = 3
STRATEGIES = ("guided", "top-configs", "top-layouts", "tpe", "gp", "random")
BASELINES = ("top-configs", "top-layouts")
"""The plain baselines: the model's best configs in its order, and the best config of each of
its best distinct parallel layouts in its order; nothing learnt."""
PARALLEL_KNOBS = ("tp", "pp", "vpp", "cp", "ep", "etp")
LAYOUT_SPACES = (
    ("megatron", "llama3-70b", 16),
    ("torch", "llama3-8b", 16),
    ("megatron", "gpt3-175b", 16),
    ("torch", "gpt3-175b", 64),
    ("torch", "llama3-8b", 32),
    ("megatron", "llama3-70b", 32),
)
"""The `layouts` family's spaces: 10,000 to 140,000 configs that fit."""
CLASS_KNOBS = ("tp", "pp", "vpp", "cp", "mbs", "zero", "hsdp", "recompute", "sp")
MINOR_KNOBS = (
    "overlap_comm", "overlap_param_gather", "tp_comm_overlap", "ep_comm_overlap",
    "reduce_bucket", "allgather_bucket", "ddp_bucket_mb", "nccl_algo", "nccl_proto",
)  # fmt: skip
CONFIG_NOISE = 0.005
"""A config's own error in the `layouts` family, shared with none: small, so that what sets
configs apart is what a search can learn (layouts, classes, minor knobs' values)."""
LAYOUT_SPREADS = (0.04, 0.12)
MINOR_SPREADS = (0.01, 0.03)
CLASS_BIASES = (0.0, 0.15)
"""The `layouts` family: per world, a parallel layout's own error, a config's own error (what
its minor knobs move) and the largest class bias, each drawn uniform in these bounds."""
TIE = 0.001
"""Regrets closer than this are tied; the tie goes to the strategy there sooner."""
RUNS = REPO / "results/bench/search_worlds_runs"
optuna.logging.set_verbosity(optuna.logging.ERROR)


@dataclass(frozen=True)
class Space:
    problem: Problem
    ranked: Ranked
    predicted: np.ndarray
    """Predicted tokens/s of each row of ranked.table."""


@functools.cache
def space(engine: str, model: str, nodes: int) -> Space:
    problem = load_problem(engine, model, f"dgx-h100:{nodes}")
    cal = DEFAULT_CALIBRATION[problem.cluster.device.generation]
    valid = problem.enumerate().valid
    ranked = memory_verdicts(problem.workload, problem.cluster, problem.engine.traits, valid, cal)
    model_ = Predictor.of(
        problem.workload, ranked.table, problem.cluster, problem.engine.traits, cal.collectives
    )
    return Space(problem, ranked, model_.at(cal).tokens_per_s)


@dataclass(frozen=True)
class World:
    name: str
    space: Space
    truth: np.ndarray
    """True tokens/s of each row of the space's table."""
    drawn: str

    @property
    def best(self) -> float:
        return float(self.truth.max())


def _groups(table: object, knobs: list[str]) -> np.ndarray:
    columns = [np.unique(getattr(table, k), return_inverse=True)[1].reshape(-1) for k in knobs]
    return np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def draw_world(seed: int) -> World:
    spec = SPACES[seed % len(SPACES)]
    s = space(*spec)
    table, rng = s.ranked.table, np.random.default_rng(seed)
    top = s.ranked.order[:LEADERS]
    values = [
        (k, v)
        for k in STRUCTURAL
        if len(np.unique(getattr(table, k))) > 1
        for v in np.unique(getattr(table, k)[top]).tolist()
    ]
    error = np.zeros(len(table))
    drawn = []
    for i in rng.choice(len(values), size=BIASED_VALUES, replace=False):
        knob, value = values[i]
        bias = rng.uniform(-CLASS_BIAS, CLASS_BIAS)
        error += np.where(getattr(table, knob) == value, bias, 0.0)
        drawn.append(f"{knob}={value} {bias:+.1%}")
    while True:
        a, b = (values[i] for i in rng.choice(len(values), size=2, replace=False))
        if a[0] != b[0]:
            break
    both = (getattr(table, a[0]) == a[1]) & (getattr(table, b[0]) == b[1])
    bias = rng.uniform(-INTERACTION, INTERACTION)
    error += np.where(both, bias, 0.0)
    drawn.append(f"{a[0]}={a[1]} with {b[0]}={b[1]} {bias:+.1%}")
    layouts = _groups(table, ["tp", "pp", "vpp", "cp", "ep", "etp"])
    error += rng.normal(0, LAYOUT_ERROR, layouts.max() + 1)[layouts]
    configs = _groups(table, [k for k in KNOBS if k not in NCCL_KNOBS])
    error += rng.normal(0, CONFIG_ERROR, configs.max() + 1)[configs]
    name = f"{spec[1]} {spec[0]} on {spec[2]} nodes"
    return World(name, s, s.predicted * np.exp(error), "; ".join(drawn))


def draw_layout_world(seed: int) -> World:
    """A world of the `layouts` family: each parallel layout off by its own error, each value
    of a minor knob (`MINOR_KNOBS`) by a smaller effect shared by every config with it,
    `BIASED_VALUES` classes of the leaders' structural values (`CLASS_KNOBS`) by up to the
    world's class bias, and each config by `CONFIG_NOISE` of its own."""
    spec = LAYOUT_SPACES[seed % len(LAYOUT_SPACES)]
    s = space(*spec)
    table, rng = s.ranked.table, np.random.default_rng([57, seed])
    layout_spread, minor, most = (
        rng.uniform(*bounds) for bounds in (LAYOUT_SPREADS, MINOR_SPREADS, CLASS_BIASES)
    )
    top = s.ranked.order[:LEADERS]
    values = [
        (k, v)
        for k in CLASS_KNOBS
        if len(np.unique(getattr(table, k))) > 1
        for v in np.unique(getattr(table, k)[top]).tolist()
    ]
    error = np.zeros(len(table))
    drawn = [f"layouts {layout_spread:.1%}", f"minor knobs {minor:.1%}"]
    for i in rng.choice(len(values), size=BIASED_VALUES, replace=False):
        knob, value = values[i]
        bias = rng.uniform(-most, most)
        error += np.where(getattr(table, knob) == value, bias, 0.0)
        drawn.append(f"{knob}={value} {bias:+.1%}")
    layouts = _groups(table, list(PARALLEL_KNOBS))
    error += rng.normal(0, layout_spread, layouts.max() + 1)[layouts]
    for knob in MINOR_KNOBS:
        column = getattr(table, knob)
        kinds, which = np.unique(column, return_inverse=True)
        if len(kinds) > 1:
            error += rng.normal(0, minor, len(kinds))[which.reshape(-1)]
    error += rng.normal(0, CONFIG_NOISE, len(table))
    name = f"{spec[1]} {spec[0]} on {spec[2]} nodes"
    return World(name, s, s.predicted * np.exp(error), "; ".join(drawn))


FAMILIES = {"classes": draw_world, "layouts": draw_layout_world}


def run_baseline(world: World, kind: str) -> list[int]:
    """The model's best configs in its order, or the best of each of its best distinct
    parallel layouts."""
    order = world.space.ranked.order
    if kind == "top-configs":
        return [int(row) for row in order[:BUDGET]]
    layouts = _groups(world.space.ranked.table, list(PARALLEL_KNOBS))
    first = np.unique(layouts[order], return_index=True)[1]
    return [int(row) for row in order[np.sort(first)][:BUDGET]]


def _tell(study: optuna.Study, trial: optuna.Trial, world: World, row: int) -> None:
    config = world.space.ranked.table.config(row)
    trial.set_user_attr("config", config.as_dict())
    trial.set_user_attr("config_key", config_key(config))
    tps = float(world.truth[row])
    trial.set_user_attr("step_time_s", world.space.problem.workload.tokens_per_step / tps)
    study.tell(trial, tps)


def run_guided(world: World, seed: int) -> list[int]:
    """The default search, one worker: the rows it measured, in order."""
    s = world.space
    cal = DEFAULT_CALIBRATION[s.problem.cluster.device.generation]
    guide = GuidedSearch(s.problem, s.ranked.fastest_first, cal, seed)
    study = optuna.create_study(direction="maximize")
    ran: list[int] = []
    while len(ran) < BUDGET:
        guide.learn(study.get_trials(deepcopy=False))
        seen = {t.user_attrs["config_key"] for t in study.get_trials(deepcopy=False)}
        best = study.best_value if ran else None
        if guide.converged(seen, best):
            break
        proposal = guide.propose(seen)
        row = None if proposal is None else s.ranked.table.row_of(proposal)
        if row is None:
            break
        ran.append(row)
        _tell(study, study.ask(), world, row)
    return ran


class _CpuTorch:
    """torch for Optuna's GP sampler, less its `torch.device("cpu")` guard (see above)."""

    def __getattr__(self, name: str) -> object:
        import torch

        return getattr(torch, name)

    def device(self, *_: object) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def _unguarded_gp() -> None:
    from optuna.samplers._gp import sampler as gp_module

    gp_module.torch = _CpuTorch()  # type: ignore[assignment]


def cached_run(
    world: World, strategy: str, seed: int, rerun: bool, stored: bool, key: str
) -> list[int] | None:
    """A sampler's rows in this world, from its runs file while the world is the same;
    `stored`: only from there (None: not run in this world yet)."""
    path = RUNS / f"{strategy}.json"
    runs = json.loads(path.read_text()) if path.exists() else {}
    stamp = f"{world.name}; {len(world.truth)}; {world.drawn}; optuna {optuna.__version__}"
    kept = runs.get(key)
    if kept and kept["world"] == stamp and not rerun:
        return [int(row) for row in kept["rows"]]
    if stored:
        return None
    rows = run_sampler(world, strategy, seed)
    runs = json.loads(path.read_text()) if path.exists() else {}  # another run may have added
    runs[key] = {"world": stamp, "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    written = path.with_suffix(".tmp")
    written.write_text(json.dumps(runs, indent=0, sort_keys=True) + "\n")
    written.replace(path)
    return rows


def run_sampler(world: World, strategy: str, seed: int) -> list[int]:
    """An Optuna sampler as `autotune run --strategy` runs it: the rows it measured."""
    s = world.space
    choices = StudySpace.from_valid(s.ranked.table)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(strategy, seed))
    for row in s.ranked.order[:SEEDS_FROM_PLAN]:
        study.enqueue_trial(choices.params(s.ranked.table.config(int(row))))
    rng, misses = np.random.default_rng(seed), 0
    ran: list[int] = []
    while len(ran) < BUDGET:
        if misses >= MISSES:
            untried = np.setdiff1d(np.arange(len(s.ranked.table)), ran)
            row = int(rng.choice(untried))
            study.enqueue_trial(choices.params(s.ranked.table.config(row)))
            misses = 0
        trial = study.ask(choices.distributions)
        try:
            config = choices.config(trial.params, s.problem.cluster.world_size)
            row = s.ranked.table.row_of(config)
        except ValueError:
            row = None
        if row is None or row in ran:
            misses += 1
            study.tell(trial, state=TrialState.PRUNED)
            continue
        misses = 0
        ran.append(row)
        _tell(study, trial, world, row)
    return [int(row) for row in ran]


@dataclass(frozen=True)
class Score:
    regret: dict[int, float]
    to_within: float
    """Trials to a config within `WITHIN` of the best (inf: not in the budget)."""
    to_best_of_12: int
    """Trials to the best of the first 12 (within `TIE`): the tie-break between equals."""


def regret_curve(world: World, ran: list[int]) -> list[float]:
    """Regret after each of the first `BUDGET` trials (a search that stopped keeps its last)."""
    found = np.maximum.accumulate(world.truth[ran]) if ran else np.zeros(1)
    return [1 - float(found[min(n, len(found)) - 1]) / world.best for n in range(1, BUDGET + 1)]


def score(world: World, ran: list[int]) -> Score:
    found = np.maximum.accumulate(world.truth[ran]) if ran else np.zeros(1)
    regret = {n: 1 - float(found[min(n, len(found)) - 1]) / world.best for n in REGRET_AT}
    near = np.flatnonzero(found >= world.best * (1 - WITHIN))
    first_12 = found[:12]
    to_best = int(np.flatnonzero(first_12 >= first_12[-1] - TIE * world.best)[0]) + 1
    return Score(regret, float(near[0] + 1) if len(near) else math.inf, to_best)


def against(pairs: list[tuple[Score, Score]]) -> tuple[int, int, int, int]:
    """Of (guided, other) pairs, the worlds where guided's regret after 12 trials is lower;
    tied and guided there sooner; tied in the same trial; higher, or tied and later."""
    lower = sooner = same = 0
    for g, o in pairs:
        if g.regret[12] < o.regret[12] - TIE:
            lower += 1
        elif abs(g.regret[12] - o.regret[12]) <= TIE:
            sooner += g.to_best_of_12 < o.to_best_of_12
            same += g.to_best_of_12 == o.to_best_of_12
    return lower, sooner, same, len(pairs) - lower - sooner - same


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def _summary(scores: dict[str, list[Score | None]]) -> list[str]:
    """One row per strategy: regret after 12 and 20 trials, trials to within `WITHIN`."""
    lines = [
        "| strategy | worlds | regret @12 median | p90 | regret @20 median | p90 "
        f"| trials to within {WITHIN:.0%} (median) | within {WITHIN:.0%} in {BUDGET} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, kept in scores.items():
        s = [x for x in kept if x is not None]
        if not s:  # a sampler read only from its runs file, run in none of these worlds
            lines.append(f"| {name} | 0 | - | - | - | - | - | - |")
            continue
        to = [x.to_within for x in s]
        median_to = statistics.median(to)
        lines.append(
            f"| {name} | {len(s)} | {statistics.median(x.regret[12] for x in s):.1%} "
            f"| {_pct([x.regret[12] for x in s], 90):.1%} "
            f"| {statistics.median(x.regret[20] for x in s):.1%} "
            f"| {_pct([x.regret[20] for x in s], 90):.1%} "
            f"| {'never' if median_to == math.inf else f'{median_to:g}'} "
            f"| {sum(t < math.inf for t in to)} of {len(to)} |"
        )
    return lines


def _wins(scores: dict[str, list[Score | None]]) -> list[str]:
    """Guided against each other strategy, in the worlds both ran, and the goals."""
    lines = [
        "",
        "Guided against each strategy, regret after 12 trials (lower by more than "
        f"{TIE:.1%}, else tied and reached in fewer trials), in the worlds both ran:",
        "",
        "| against | worlds | guided lower | tied, guided there sooner | tied, same trial "
        "| guided higher, or tied and later | guided wins |",
        "|---|---|---|---|---|---|---|",
    ]
    share = {}
    for other in (k for k in scores if k != "guided"):
        pairs = [(g, o) for g, o in zip(scores["guided"], scores[other], strict=True) if g and o]
        if not pairs:
            continue
        lower, sooner, same, worse = against(pairs)
        share[other] = (lower + sooner) / len(pairs)
        lines.append(
            f"| {other} | {len(pairs)} | {lower} | {sooner} | {same} | {worse} "
            f"| {lower + sooner} ({share[other]:.0%}); strictly lower {lower / len(pairs):.0%} |"
        )
    g12 = [x.regret[12] for x in scores["guided"] if x]
    median, p90 = statistics.median(g12), _pct(g12, 90)
    samplers = {k: v for k, v in share.items() if k not in BASELINES}
    beats = all(v >= 0.8 for v in samplers.values())
    return lines + [
        "",
        f"Goals: median regret after 12 trials <= 2%: {median:.1%}, "
        f"{'met' if median <= 0.02 else 'not met'}; p90 <= 5%: {p90:.1%}, "
        f"{'met' if p90 <= 0.05 else 'not met'}; guided wins against each of "
        f"{', '.join(samplers)} in >= 80% of worlds: {'met' if beats else 'not met'}.",
    ]


def _world_words(family: str) -> str:
    if family == "classes":
        return (
            f"{BIASED_VALUES} class-wide biases on values of {', '.join(STRUCTURAL)} up to "
            f"+-{CLASS_BIAS:.0%}, one interaction of two knob values up to +-{INTERACTION:.0%}, "
            f"a parallel-layout error of {LAYOUT_ERROR:.0%} and a per-config error of "
            f"{CONFIG_ERROR:.0%}"
        )
    return (
        "per world, a parallel layout's own error of spread "
        f"{LAYOUT_SPREADS[0]:.0%}-{LAYOUT_SPREADS[1]:.0%}, an effect of each value of the minor "
        f"knobs ({', '.join(MINOR_KNOBS)}) of spread "
        f"{MINOR_SPREADS[0]:.0%}-{MINOR_SPREADS[1]:.0%}, "
        f"{BIASED_VALUES} class-wide biases on values of {', '.join(CLASS_KNOBS)} up to a drawn "
        f"{CLASS_BIASES[0]:.0%}-{CLASS_BIASES[1]:.0%}, and a config's own error of "
        f"{CONFIG_NOISE:.1%}"
    )


def _against_baseline(curves: dict[str, list[list[float]]]) -> list[str]:
    """Guided against the distinct-layout baseline at every budget."""
    if "top-layouts" not in curves or "guided" not in curves:
        return []
    pairs = [(g, b) for g, b in zip(curves["guided"], curves["top-layouts"], strict=True) if g]
    at_12 = sum(g[11] <= b[11] + TIE for g, b in pairs)
    every = sum(all(x <= y + TIE for x, y in zip(g, b, strict=True)) for g, b in pairs)
    behind = [n + 1 for n in range(BUDGET) if any(g[n] > b[n] + TIE for g, b in pairs)]
    share = at_12 / len(pairs)
    return [
        "",
        f"Guided against the model's top distinct layouts (within {TIE:.1%} counts as at): at "
        f"or below it after 12 trials in {at_12} of {len(pairs)} worlds ({share:.0%}); "
        f"at or below it at every budget from 1 to {BUDGET} in {every} of {len(pairs)}"
        + (f"; behind it somewhere at budgets {behind}." if behind else "."),
    ]


def report(
    worlds: list[World],
    scores: dict[str, list[Score | None]],
    curves: dict[str, list[list[float]]],
    args: argparse.Namespace,
    took: float,
) -> str:
    command = (
        f"`.venv/bin/python -m benchmarks.search_worlds --worlds {args.worlds} "
        f"--first-seed {args.first_seed}"
        + (f" --family {args.family}" if args.family != "classes" else "")
        + (f" --strategies {args.strategies}" if args.strategies != ",".join(STRATEGIES) else "")
        + (f" --stored-only {args.stored_only}" if args.stored_only else "")
        + "`"
    )
    title = "structured model error" if args.family == "classes" else "per-layout model error"
    lines = [
        f"# Search in {len(worlds)} worlds of {title} (seeds "
        f"{args.first_seed}-{args.first_seed + len(worlds) - 1})",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by {command} in "
        f"{took:.0f} s; Optuna's samplers' runs from results/bench/search_worlds_runs/ where "
        f"stored. SIMULATED: the truth is the model times a drawn error "
        f"({_world_words(args.family)}); {BUDGET} search trials, no noise. Regret: 1 - best "
        "true throughput found / the world's best. top-configs and top-layouts are the plain "
        "baselines: the model's best configs in its order, and the best config of each of its "
        "best distinct parallel layouts (tp, pp, vpp, cp, ep, etp) in its order.",
        "",
        *_summary(scores),
        *_wins(scores),
        *_against_baseline(curves),
        "",
        "| seed | world | configs | drawn | " + " | ".join(f"{k} @12" for k in scores) + " |",
        "|---|---|---|---|" + "---|" * len(scores),
    ]
    for i, w in enumerate(worlds):
        regrets = " | ".join(
            "not run" if (x := scores[k][i]) is None else f"{x.regret[12]:.1%}" for k in scores
        )
        lines.append(
            f"| {args.first_seed + i} | {w.name} | {len(w.truth):,} | {w.drawn} | {regrets} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rerun", action="store_true", help="Optuna's samplers afresh")
    parser.add_argument(
        "--stored-only",
        default="",
        help="samplers (comma-separated) read only from their runs file, in the worlds "
        "where they have run (GP: minutes a world, filled apart)",
    )
    parser.add_argument("--family", choices=sorted(FAMILIES), default="classes")
    args = parser.parse_args()
    started = time.monotonic()
    strategies = args.strategies.split(",")
    _unguarded_gp()
    stored = set(filter(None, args.stored_only.split(",")))
    scores: dict[str, list[Score | None]] = {k: [] for k in strategies}
    curves: dict[str, list[list[float]]] = {k: [] for k in strategies}
    worlds = []
    for seed in range(args.first_seed, args.first_seed + args.worlds):
        world = FAMILIES[args.family](seed)
        worlds.append(world)
        for k in strategies:
            key = str(seed) if args.family == "classes" else f"{args.family}:{seed}"
            if k == "guided":
                ran: list[int] | None = run_guided(world, seed)
            elif k in BASELINES:
                ran = run_baseline(world, k)
            else:
                ran = cached_run(world, k, seed, args.rerun, k in stored, key)
            scores[k].append(None if ran is None else score(world, ran))
            curves[k].append([] if ran is None else regret_curve(world, ran))
        regrets = {k: v[-1] and round(v[-1].regret[12], 3) for k, v in scores.items()}
        print(seed, world.name, regrets, flush=True)
    base = "search_worlds" if args.family == "classes" else f"search_{args.family}"
    name = f"{base}.md" if args.first_seed == 0 else f"{base}_check.md"
    out = args.out or REPO / "results/bench" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report(worlds, scores, curves, args, time.monotonic() - started))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
