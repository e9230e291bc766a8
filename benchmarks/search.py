"""How fast each search strategy finds a config within 2% of a world's best.

Worlds: recorded real sweeps of the tiny workload (results/benchmarks/sweep_<engine>.csv,
made by scripts/sweep.py, replayed), and simulated large worlds whose truth is the model's
prediction perturbed by a seeded, config-dependent error (~10%) and a random bias between
compute and communication, so the guided sampler's model is not the truth. Strategies: the
study loop with each of autotune's samplers (guided, tpe, gp, random, grid), and two
re-implemented baselines: DeepSpeed's autotuner "fast" mode (ZeRO stage ladder with a
micro-batch search, other knobs at defaults) and a NeMo-style tp/pp/mbs grid truncated at the
budget. Writes results/bench/search.md.

    .venv/bin/python -m benchmarks.search [--seeds 20] [--budget 30]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import optuna

from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration
from autotune.estimate.ranking import memory_verdicts
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.launchers.replay import ReplayLauncher, load_table
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig, config_key
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.study.search.samplers import make_sampler
from autotune.study.settings import Budget, SearchSettings
from autotune.study.trial_run import QuietProgress
from autotune.trial.result import Source, TrialResult
from autotune.trial.spec import TRIAL_FILE, TrialSpec

REPO = Path(__file__).resolve().parents[1]
LOOP_STRATEGIES = ("guided", "tpe", "gp", "random", "grid")
BASELINES = ("deepspeed-autotuner", "nemo-grid")
SIMULATED = [
    ("torch", "llama3-8b", "dgx-h100:4"),
    ("torch", "llama3-70b", "dgx-h100:32"),
    ("torch", "gpt3-175b", "dgx-a100:64"),
]
TRIAL_OVERHEAD_S = 90.0  # launch, imports, initialisation of a real large-model trial
TRIAL_STEPS = 30  # warm-up plus measured steps of a real trial
optuna.logging.set_verbosity(optuna.logging.ERROR)


@dataclass
class World:
    """What a strategy searches: the problem, the truth of every config, and trial cost."""

    name: str
    problem: Problem
    truth: dict[str, float | None]
    """Config key -> true tokens/s, or None for a config that fails."""
    wall: dict[str, float]
    launcher_factory: Callable[[], Launcher]
    noise: float = 0.0
    """Between-trial noise: each trial measures its config's truth times exp(N(0, noise)),
    drawn afresh per trial, as a shared cluster moves one launch of a config from the next."""
    seed: int = 0

    @property
    def best(self) -> float:
        return max(v for v in self.truth.values() if v)


class PerturbedLauncher(Launcher):
    """The model's prediction times a seeded, config-dependent error: a world to search."""

    name = "perturbed"

    def __init__(self, world: World) -> None:
        self.world = world

    @property
    def source(self) -> str:  # type: ignore[override]  # a noisy world stands for a measured one
        return "measured" if self.world.noise else "simulated"

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "simulated world"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        key = config_key(spec.config)
        tps = self.world.truth.get(key)
        if not tps:
            return LaunchOutcome(
                kind="oom", error="simulated out of memory", wall_s=self.world.wall[key]
            )
        source: Source = "simulated"
        if self.world.noise:
            draw = random.Random(f"{self.world.seed}:{request.folder.name}:{key}")
            tps *= math.exp(draw.gauss(0.0, self.world.noise))
            # A noisy world stands for a measured cluster: the study is told so, and treats
            # the trial's between-trial noise as unknown until repeats measure it.
            source = "measured"
        step = spec.workload.tokens_per_step / tps
        result = TrialResult(
            source=source, step_time_s=step, tokens_per_s=tps, tflops_per_device=0.0, mfu=None
        )
        result.write(request.folder)
        return LaunchOutcome(kind="ok", error=None, wall_s=self.world.wall[key], result=result)


def config_error(key: str, seed: int) -> float:
    """A config's own log-error in a world: seeded by its key and the world's seed, spread 10%."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return random.Random(digest).gauss(0.0, 0.10)


LAYOUT_SPACE = {
    "tp": [1, 2, 4, 8],
    "pp": [1, 2, 4, 8, 16],
    "vpp": [1, 2],
    "zero": [0, 1, 2, 3],
    "mbs": [1, 2, 4, 8],
    "recompute": ["none", "selective", "full"],
    "sp": [False, True],
}
"""The layout knobs: NCCL settings are a refinement searched once a layout leads."""


def simulated_world(engine: str, model: str, cluster: str, seed: int) -> World:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(json.dumps({"engine": engine, "knobs": LAYOUT_SPACE}))
    problem = load_problem(engine, model, cluster, f.name)
    Path(f.name).unlink()
    cal = DEFAULT_CALIBRATION[problem.cluster.device.generation]
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, problem.enumerate().valid, cal
    )
    rng = random.Random(seed)
    compute_bias, comm_bias = math.exp(rng.gauss(0, 0.1)), math.exp(rng.gauss(0, 0.3))
    truth: dict[str, float | None] = {}
    wall: dict[str, float] = {}
    for e in ranked:
        s = e.step
        comm = s.exposed_comm_s
        step = (s.total_s - comm) * compute_bias + comm * comm_bias
        step *= math.exp(config_error(config_key(e.config), seed))
        key = config_key(e.config)
        truth[key] = problem.workload.tokens_per_step / step
        wall[key] = TRIAL_OVERHEAD_S + TRIAL_STEPS * step
    name = f"{model} on {cluster} (simulated)"
    world = World(name, problem, truth, wall, lambda: PerturbedLauncher(world))
    return world


def _replayed(engine: str, table: Path, _seed: int) -> World:
    """The replayed world, the same for every seed."""
    return replayed_world(engine, table)


def replayed_world(engine: str, table: Path) -> World:
    launcher = ReplayLauncher(load_table(table))
    problem = launcher.narrow(load_problem(engine, "tiny", "local:2"))
    truth, wall = {}, {}
    for key, row in launcher.table.rows.items():
        ok = row["status"] == "ok"
        truth[key] = problem.workload.tokens_per_step / float(row["step_time_s"]) if ok else None
        wall[key] = float(row.get("wall_s") or 0.0)
    return World(f"tiny / {engine} (replayed sweep)", problem, truth, wall, lambda: launcher)


# --- strategies --------------------------------------------------------------------------
def run_loop(world: World, strategy: str, seed: int, budget: int) -> list[str]:
    """The real study loop with one of autotune's samplers; the configs it ran, in order."""
    study = optuna.create_study(direction="maximize", sampler=make_sampler(strategy, seed))
    with tempfile.TemporaryDirectory() as tmp:
        ref = StudyRef(name="bench", storage_url="memory", folder=Path(tmp))
        cal = DEFAULT_CALIBRATION.get(world.problem.cluster.device.generation, Calibration())
        # Optuna's samplers run plain, as users of Optuna alone have them (autotune itself
        # seeds them with the plan's best configs).
        run_study(
            world.problem,
            study,
            ref=ref,
            launcher=world.launcher_factory(),
            progress=QuietProgress(),
            settings=SearchSettings(
                budget=Budget(trials=budget),
                seed=seed,
                calibration=cal,
                strategy=strategy,
                seed_from_plan=False,
            ),
        )
    ran = [
        t
        for t in study.get_trials()
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    ]
    keys = [TrialAttrs.of(t).config_key for t in sorted(ran, key=lambda t: t.number)]
    return [key for key in keys if key is not None]


def _fitting(world: World) -> list[TrainConfig]:
    return [TrainConfig(**json.loads(k)) for k in world.truth]


def deepspeed_autotuner(world: World, budget: int) -> list[str]:
    """DeepSpeed's "fast" mode: ZeRO 0 to 3 in order, in each a binary search for the largest
    micro-batch that runs, then the micro-batches below it; other knobs at their defaults
    (no tensor or pipeline parallelism); stop when a stage is slower than the one before."""
    default = TrainConfig()
    ran: list[str] = []
    best_prev = 0.0
    for zero in range(4):
        stage = sorted(
            (
                c
                for c in _fitting(world)
                if c.zero == zero
                and c.tp == 1
                and c.pp == 1
                and all(
                    getattr(c, k) == getattr(default, k)
                    for k in (
                        "recompute",
                        "sp",
                        "vpp",
                        "nccl_algo",
                        "nccl_proto",
                        "reduce_bucket",
                        "allgather_bucket",
                        "overlap_comm",
                        "ddp_bucket_mb",
                    )
                )
            ),
            key=lambda c: c.mbs,
        )
        if not stage:
            continue
        lo, hi, largest = 0, len(stage) - 1, -1
        while lo <= hi and len(ran) < budget:
            mid = (lo + hi) // 2
            ran.append(config_key(stage[mid]))
            if world.truth[ran[-1]]:
                largest, lo = mid, mid + 1
            else:
                hi = mid - 1
        for c in reversed(stage[:largest]):
            if len(ran) >= budget:
                break
            ran.append(config_key(c))
        best_stage = max(
            (world.truth[k] or 0.0 for k in ran if json.loads(k)["zero"] == zero), default=0.0
        )
        if best_stage < best_prev or len(ran) >= budget:
            break
        best_prev = best_stage
    return ran[:budget]


def nemo_grid(world: World, budget: int) -> list[str]:
    """NeMo's auto-configurator style: a grid over tp, pp and micro-batch size with the other
    knobs at their defaults where valid, run in grid order until the budget."""
    default = TrainConfig()
    by_triple: dict[tuple[int, int, int], TrainConfig] = {}
    for c in _fitting(world):
        triple = (c.tp, c.pp, c.mbs)
        distance = sum(
            getattr(c, k) != getattr(default, k)
            for k in ("zero", "recompute", "sp", "vpp", "nccl_algo", "nccl_proto")
        )
        if triple not in by_triple or distance < sum(
            getattr(by_triple[triple], k) != getattr(default, k)
            for k in ("zero", "recompute", "sp", "vpp", "nccl_algo", "nccl_proto")
        ):
            by_triple[triple] = c
    return [config_key(by_triple[t]) for t in sorted(by_triple)][:budget]


# --- scoring -----------------------------------------------------------------------------
REGRET_AT = (5, 10, 12, 20)
STOP_REGRET = 0.03
"""A search that stops on its own rule with more regret than this stopped too soon."""


@dataclass(frozen=True)
class Score:
    trials_to_2pct: float
    seconds_to_2pct: float
    regret: dict[int, float]
    stopped_regret: float | None
    """The regret when the strategy stopped before its budget (its own stop rule); None when
    it ran the whole budget."""


def score(world: World, ran: list[str], budget: int) -> Score:
    best, found_at, seconds, at_found = world.best, math.inf, 0.0, math.inf
    running_best, regret = 0.0, {}
    for i, key in enumerate(ran, 1):
        seconds += world.wall.get(key, 0.0)
        running_best = max(running_best, world.truth.get(key) or 0.0)
        if found_at == math.inf and running_best >= best * 0.98:
            found_at, at_found = i, seconds
        if i in REGRET_AT:
            regret[i] = 1 - running_best / best
    final = 1 - running_best / best
    for n in REGRET_AT:
        regret.setdefault(n, final)  # a strategy that stopped early
    return Score(found_at, at_found, regret, final if len(ran) < budget else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument(
        "--gp-seeds",
        type=int,
        default=5,
        help="Seeds for Optuna's GP sampler, which takes ~30 s a run here.",
    )
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/search.md")
    args = parser.parse_args()
    worlds: list[Callable[[int], World]] = []
    for engine in ("deepspeed", "torch"):
        table = REPO / "results/benchmarks" / f"sweep_{engine}.csv"
        if table.exists():
            worlds.append(functools.partial(_replayed, engine, table))
    for engine, model, cluster in SIMULATED:
        worlds.append(functools.partial(simulated_world, engine, model, cluster))
    rows = []
    for make in worlds:
        scores: dict[str, list[Score]] = {s: [] for s in (*LOOP_STRATEGIES, *BASELINES)}
        for seed in range(args.seeds):
            world = make(seed)
            for strategy in LOOP_STRATEGIES:
                if strategy == "gp" and seed >= args.gp_seeds:
                    continue
                scores[strategy].append(
                    score(world, run_loop(world, strategy, seed, args.budget), args.budget)
                )
            scores["deepspeed-autotuner"].append(
                score(world, deepspeed_autotuner(world, args.budget), args.budget)
            )
            scores["nemo-grid"].append(score(world, nemo_grid(world, args.budget), args.budget))
        rows.append((world.name, len(world.truth), scores))
        print(
            world.name,
            {s: statistics.median(x.trials_to_2pct for x in v) for s, v in scores.items()},
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, args))
    print(f"wrote {args.out}")


def _stopped_above(scores: list[Score]) -> int:
    return sum(x.stopped_regret is not None and x.stopped_regret > STOP_REGRET for x in scores)


def _median(values: list[float]) -> str:
    m = statistics.median(values)
    return "never" if m == math.inf else f"{m:.0f}" if m >= 10 else f"{m:.1f}"


def report(rows: list[tuple[str, int, dict[str, list[Score]]]], args: argparse.Namespace) -> str:
    lines = [
        "# Search strategies: trials to a config within 2% of the best",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        f"`.venv/bin/python -m benchmarks.search --seeds {args.seeds} --budget "
        f"{args.budget} --gp-seeds {args.gp_seeds}` (Optuna's GP sampler runs on the first "
        f"{args.gp_seeds} seeds only: it takes ~30 s a run on this machine). Medians over "
        f"seeds; 'never' when the median run did not get "
        f"within 2% in {args.budget} trials (or stopped). Trial-seconds: simulated worlds "
        f"charge {TRIAL_OVERHEAD_S:.0f} s + {TRIAL_STEPS} steps per trial; replayed "
        "worlds charge the recorded wall time. Regret: 1 - best found / best; 100% means "
        "the strategy ran nothing that works (DeepSpeed's heuristic keeps tp = pp = 1, which "
        "does not fit the largest models).",
        "",
    ]
    for name, size, scores in rows:
        lines += [
            f"## {name}: {size} configs",
            "",
            "| strategy | trials to 2% | trial-seconds to 2% | regret @5 | @10 | @12 | @20 "
            f"| stopped above {STOP_REGRET:.0%} regret |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for strategy, s in scores.items():
            lines.append(
                f"| {strategy} | {_median([x.trials_to_2pct for x in s])} | "
                f"{_median([x.seconds_to_2pct for x in s])} | "
                + " | ".join(f"{statistics.median(x.regret[n] for x in s):.1%}" for n in REGRET_AT)
                + f" | {_stopped_above(s)} of {len(s)} |"
            )
        guided_12 = statistics.median(x.regret[12] for x in scores["guided"])
        tpe_12 = statistics.median(x.regret[12] for x in scores["tpe"])
        stopped = _stopped_above(scores["guided"])
        guided = statistics.median(x.trials_to_2pct for x in scores["guided"])
        tpe = statistics.median(x.trials_to_2pct for x in scores["tpe"])
        rnd = statistics.median(x.trials_to_2pct for x in scores["random"])
        lines += [
            "",
            f"Goals: guided <= TPE/3 ({guided:g} vs {tpe / 3:.1f}): "
            f"{'met' if guided <= tpe / 3 else 'not met'}; guided <= random/10 "
            f"({guided:g} vs {rnd / 10:.1f}): {'met' if guided <= rnd / 10 else 'not met'}"
            + (
                ""
                if "replayed" in name
                else f"; guided <= 12: {'met' if guided <= 12 else 'not met'}"
                f"; guided's median regret after 12 trials <= {STOP_REGRET:.0%} and below "
                f"TPE's ({guided_12:.1%} vs {tpe_12:.1%}): "
                f"{'met' if guided_12 <= STOP_REGRET and guided_12 < tpe_12 else 'not met'}"
                f"; guided stops above {STOP_REGRET:.0%} regret in at most 1 of "
                f"{len(scores['guided'])} seeds ({stopped}): "
                f"{'met' if stopped <= 1 else 'not met'}"
            )
            + ".",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"{time.time() - started:.0f} s")
