"""Tuning a big job on a slice of it (`autotune run --trial-nodes N`) against tuning it at
full size and against the plan alone, in simulated worlds of 1,024 and 8,192 GPUs.

A world's truth is the model moved by what the model does not know, some of which changes
with scale: a seeded compute/communication bias and a config-dependent error (~10%: half its
variance comes with the config's per-GPU work, everything but its pipeline depth and data
parallelism, which a shallower proxy shares; the other half with the run's own layout, the
same for a config on the slice as at full size, a proxy's its own), data-parallel
efficiency that falls with the node count (the data-parallel gradient traffic slowed by
(nodes/4)^k), a spine penalty beyond 32 nodes (a rail-aligned block: that traffic slower
again), and stragglers that grow with the node count and hit pipelines with more chunks
harder (1% per doubling of nodes, times 1 + log2(PP·VPP)/7: at 1,024 nodes 1.10x without a
pipeline, 1.20x with 128 chunks; published weak scaling keeps 52% of peak from 32 to 3,072
GPUs with 64 stages, Narayanan et al. 2021 in shared/data, so no layout loses twice its
speed to them); moderate and harsh settings of these (`SCALES`). Each study is the real
study loop (guided search) on a launcher that answers with the truth at the trial's node
count; a trial costs its nodes for 90 s plus 30 steps (`study.slice.cost`). Arms: the
plan's best config (no trial); full-size guided studies with the default 8 trials and until
converged; slice studies on 8 and 16 nodes, which search until converged, run their scale
probes (the best leaders on twice the slice, charged to every arm), search on under the
miss they learn until converged again, and confirm leaders at full size (`--confirm-full`
0, 1, 2, read off one study: 0 names the best extrapolation, from a search the probes
helped, which a real --confirm-full 0 study runs none of; 1 the first leader measured at
full size, 2 the better of two; this script's --confirm-full N reads 0 to N); and ideal
slice studies, not designs: each knows every config as its slice would read it with no
noise and no search (its full-size truth with the scale effects of the slice's node count;
a config whose own layout does not run on the slice with a proxy's own error in place of
its layout's), learns none of the scale effects beyond the slice (or all but the spine),
and launches its top N at full size (N of --confirm-full, at least 1; its slice charged
nothing): what reading the slice perfectly gives, and how many of its top configs it would
have to launch at full size to hold one within 2% of the full-size study's winner in 90%
of seeds, at what share of that study's GPU-hours. Regret is against the converged full-size
study's winner (negative: better than it) and against the world's best config; GPU-hours
against that study's. Writes results/benchmarks/slice.md.

    .venv/bin/python -m benchmarks.slice [--seeds 20] [--worlds 1024,8192]
        [--scales moderate,harsh] [--confirm-full 2]
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
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.estimate.predict import estimate
from autotune.estimate.ranking import Ranked, memory_verdicts
from autotune.estimate.steptime import StepTime
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig, config_key
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import FULL_OF, RANKED_BY, SCALE_PROBE, TrialAttrs
from autotune.study.settings import Budget, SearchSettings
from autotune.study.slice.cost import (
    SIMULATED_STEPS,
    SIMULATED_TRIAL_S,
    trial_gpu_hours,
)
from autotune.study.slice.trials import SliceSettings, slice_view
from autotune.study.trial_run import QuietProgress
from autotune.study.verdict.confirm import Standing
from autotune.study.verdict.winner import decide
from autotune.trial.result import TrialResult
from autotune.trial.spec import TRIAL_FILE, TrialSpec

REPO = Path(__file__).resolve().parents[1]
WORLDS = {
    1024: ("megatron", "llama3-70b", "dgx-h100:128"),
    8192: ("megatron", "llama3.1-405b", "dgx-h100:1024"),
}
SPACE = {
    "engine": "megatron",
    "knobs": {
        "sp": [False, True],
        "zero": [0, 1],
        "recompute": ["none", "selective", "full"],
        "overlap_comm": [True],
        "overlap_param_gather": [False, True],
    },
}
"""Megatron's layouts (TP, PP, VPP, CP, micro-batch derived), without NCCL settings."""
SLICES = (8, 16)
FULL_TRIALS = 8
CONVERGED_CAP = 48
"""Trials at most of a study run until its search converges (slice or full size)."""
REFERENCE = "full-converged"
WITHIN = 0.02
optuna.logging.set_verbosity(optuna.logging.ERROR)


ERROR = 0.10
"""A config's error in the world, as a standard deviation of its log."""
SHARED = 0.5
"""The share of that error's variance that comes with the config's per-GPU work (every knob
but PP and DP, at the job's depth), which a shallower proxy of it shares."""


def _error(key: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return random.Random(digest).gauss(0.0, ERROR)


def config_error(config: TrainConfig, own: str, seed: int) -> float:
    """The log error of a run of `config`: its per-GPU work's, shared with every run that
    differs only in PP and DP, and its own (`own`: its layout's key, layers included)."""
    work = config_key(replace(config, pp=1, dp=1))
    return math.sqrt(SHARED) * _error(f"work {work}", seed) + math.sqrt(1 - SHARED) * _error(
        own, seed
    )


@dataclass(frozen=True)
class Scale:
    """How the truth changes with the node count: the data-parallel traffic slowed by
    (nodes/4)^dp_exponent, and by `spine` beyond 32 nodes; stragglers add `straggler` per
    doubling of the nodes, times 1 + log2(PP·VPP)/7."""

    name: str
    dp_exponent: float
    spine: float
    straggler: float


SCALES = {
    "moderate": Scale("moderate", 0.15, 1.2, 0.01),
    "harsh": Scale("harsh", 0.3, 1.4, 0.01),
}


def learnt(scale: Scale, nodes: int, cluster_nodes: int) -> dict[str, tuple[Scale, int]]:
    """What an ideal slice study of `nodes` knows of the scale effects, by the arm's suffix,
    and at what node count: those its slice has, or all the full-size job has but the spine
    (what probes short of 32 nodes could at best learn)."""
    return {
        "": (scale, nodes),
        ", all but the spine learnt": (replace(scale, spine=1.0), cluster_nodes),
    }


@dataclass(frozen=True)
class World:
    problem: Problem
    seed: int
    compute_bias: float
    comm_bias: float
    scale: Scale

    def step(self, s: StepTime[float], config: TrainConfig, key: str, nodes: int) -> float:
        """The true step time of `config` on `nodes`, from the model's; `key`: the run's own
        layout (a slice's full-size config, a proxy's own with its layers)."""
        comm = s.exposed_comm_s
        dp_slow = (nodes / 4) ** self.scale.dp_exponent * (self.scale.spine if nodes > 32 else 1)
        step = (s.total_s - comm) * self.compute_bias + comm * self.comm_bias
        step += s.dp_comm_s * self.comm_bias * (dp_slow - 1) * 0.5
        chunks = math.log2(config.pp * config.vpp)
        step *= 1 + self.scale.straggler * math.log2(nodes) * (1 + chunks / 7)
        return step * math.exp(config_error(config, key, self.seed))

    def full_truth(
        self, proxied: frozenset[str] = frozenset(), nodes: int | None = None
    ) -> dict[str, float]:
        """Tokens/s at full size of every config predicted to fit; those `proxied` (their
        keys) with a proxy's own error in place of their own layout's, as a slice that
        cannot run their layout sees them; given `nodes`, with the scale effects of that
        many nodes (a slice's) instead of the cluster's."""
        p = self.problem
        truth = {}
        for e in predicted(p.cluster.world_size):
            key = config_key(e.config)
            own = f"{key} proxy" if key in proxied else key
            truth[key] = p.workload.tokens_per_step / self.step(
                e.step, e.config, own, nodes or p.cluster.nodes
            )
        return truth


@dataclass
class TruthLauncher(Launcher):
    """Answers each trial with the world's truth at the trial's node count."""

    world: World
    name = "truth"
    source = "simulated"

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "simulated world"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        p, nodes = self.world.problem, spec.cluster.nodes
        full = replace(spec.config, dp=spec.config.dp * (p.cluster.nodes // nodes))
        e = estimate(
            spec.workload,
            spec.config,
            spec.cluster,
            p.engine.traits,
            DEFAULT_CALIBRATION["hopper"],
        )
        if not e.fits:
            return LaunchOutcome(kind="oom", error="simulated out of memory", wall_s=90.0)
        own = config_key(full)
        if spec.workload.num_layers != p.workload.num_layers:  # a proxy: its own layout
            own += f" layers={spec.workload.num_layers}"
        step = self.world.step(e.step, spec.config, own, nodes)
        result = TrialResult(
            source="simulated",
            step_time_s=step,
            tokens_per_s=spec.workload.tokens_per_step / step,
            tflops_per_device=0.0,
            mfu=None,
        )
        result.write(request.folder)
        return LaunchOutcome(kind="ok", error=None, wall_s=90 + 30 * step, result=result)


def study(world: World, trials: int | None, nodes: int | None, confirm: int = 2) -> optuna.Study:
    s = optuna.create_study(direction="maximize")
    with tempfile.TemporaryDirectory() as tmp:
        run_study(
            world.problem,
            s,
            ref=StudyRef(name="bench", storage_url="memory", folder=Path(tmp)),
            launcher=TruthLauncher(world),
            progress=QuietProgress(),
            settings=SearchSettings(
                budget=Budget(trials=trials),
                seed=world.seed,
                calibration=DEFAULT_CALIBRATION["hopper"],
                slice=SliceSettings(nodes, confirm_full=confirm) if nodes else None,
            ),
        )
    return s


def _hours(trials: list[optuna.trial.FrozenTrial], world: World) -> float:
    return sum(trial_gpu_hours(t, world.problem.cluster) for t in trials)


def slice_arms(s: optuna.Study, world: World, confirm: int = 2) -> dict[int, tuple[str, float]]:
    """Per --confirm-full 0 to `confirm`: the config named and the GPU-hours spent."""
    ran = s.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
    probes = [t for t in ran if SCALE_PROBE in t.user_attrs]
    search = [t for t in ran if t.user_attrs.get(RANKED_BY) != "full"]  # the probes too
    full = sorted((t for t in ran if FULL_OF in t.user_attrs), key=lambda t: t.number)
    done = [t for t in search if t.state == TrialState.COMPLETE and t.value and t not in probes]
    arms = {0: (_key(max(done, key=lambda t: t.value or 0.0)), _hours(search, world))}
    for n in range(1, confirm + 1):
        measured = [t for t in full[:n] if t.state == TrialState.COMPLETE and t.value]
        named = _key(max(measured, key=lambda t: t.value or 0.0)) if measured else arms[0][0]
        arms[n] = (named, _hours(search + full[:n], world))
    standing = _winner(s)
    assert standing is not None and _key(standing.trial) == arms[confirm][0]
    return arms


def _key(t: optuna.trial.FrozenTrial) -> str:
    key = TrialAttrs.of(t).config_key
    assert key is not None
    return key


@functools.cache
def world_problem(gpus: int) -> Problem:
    """The world's problem, its enumeration computed once for every seed and study."""
    problem = load_problem(*WORLDS[gpus], _space_file())
    enumeration = problem.enumerate()
    object.__setattr__(problem, "enumerate", lambda: enumeration)
    return problem


@functools.cache
def predicted(gpus: int) -> Ranked:
    """The model's estimate of every config of the world predicted to fit, best first,
    computed once for every seed and arm."""
    p = world_problem(gpus)
    cal = DEFAULT_CALIBRATION["hopper"]
    return memory_verdicts(p.workload, p.cluster, p.engine.traits, p.enumerate().valid, cal)


def one_seed(gpus: int, seed: int, scale: Scale, confirm: int = 2) -> tuple[Arms, Needs]:
    """Per arm: (true tokens/s of its pick, GPU-hours, trials); per ideal arm, what it needs
    (`Needs`)."""
    problem = world_problem(gpus)
    rng = random.Random(seed)
    biases = math.exp(rng.gauss(0, 0.1)), math.exp(rng.gauss(0, 0.3))
    world = World(problem, seed, *biases, scale)
    truth = world.full_truth()
    plan = predicted(gpus)[0]
    arms = {
        "best": (max(truth.values()), 0.0, 0.0),
        "plan": (truth[config_key(plan.config)], 0.0, 0),
    }
    orders: dict[str, list[str]] = {}
    for nodes in SLICES:  # the top `confirm` of what an ideal slice knows, at full size
        for suffix, (known, at) in learnt(scale, nodes, problem.cluster.nodes).items():
            arm = f"ideal slice-{nodes}{suffix}"
            seen = World(problem, seed, *biases, known).full_truth(proxied(gpus, nodes), at)
            orders[arm] = sorted(seen, key=lambda k: -seen[k])
            top = orders[arm][: max(confirm, 1)]
            hours = sum(_full_launch_hours(problem, truth[k]) for k in top)
            arms[arm] = (max(truth[k] for k in top), hours, len(top))
    for name, trials in (("full-8", FULL_TRIALS), ("full-converged", CONVERGED_CAP)):
        s = study(world, trials, None)
        ran = s.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        standing = _winner(s)
        assert standing is not None
        arms[name] = (truth[_key(standing.trial)], _hours(ran, world), len(ran))
    needs: Needs = {}
    near = arms[REFERENCE][0] * (1 - WITHIN)
    for arm, order in orders.items():
        rank = next(i for i, k in enumerate(order) if truth[k] >= near)
        needs[arm] = (rank + 1, tuple(_full_launch_hours(problem, truth[k]) for k in order))
    for nodes in SLICES:
        s = study(world, CONVERGED_CAP, nodes, confirm)
        n_ran = len(s.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)))
        for n, (key, hours) in slice_arms(s, world, confirm).items():
            arms[f"slice-{nodes}, confirm {n}"] = (truth[key], hours, n_ran - confirm + n)
    return arms, needs


@functools.cache
def proxied(gpus: int, nodes: int) -> frozenset[str]:
    """Keys of the world's configs whose own layout does not run on `nodes` (model-parallel
    group, rules or memory), which a slice study measures on a proxy."""
    problem = world_problem(gpus)
    cal, traits = DEFAULT_CALIBRATION["hopper"], problem.engine.traits
    keys = set()
    for e in predicted(gpus):
        view = slice_view(problem, e.config, nodes)
        runs = (
            view.why_not is None
            and estimate(view.workload, view.config, view.cluster, traits, cal).fits
        )
        if not runs:
            keys.add(config_key(e.config))
    return frozenset(keys)


def _full_launch_hours(problem: Problem, tokens_per_s: float) -> float:
    """GPU-hours of one simulated full-size trial at `tokens_per_s` (`study.slice.cost`)."""
    step = problem.workload.tokens_per_step / tokens_per_s
    seconds = SIMULATED_TRIAL_S + SIMULATED_STEPS * step
    return seconds * problem.cluster.nodes * problem.cluster.devices_per_node / 3600


def _space_file() -> str:
    path = Path(tempfile.gettempdir()) / "bench_slice_space.yaml"
    path.write_text(json.dumps(SPACE))
    return str(path)


def table(gpus: int, scale: Scale, runs: list[Arms], needs: list[Needs]) -> list[str]:
    lines = [
        f"### {gpus:,} GPUs, {scale.name} scale effects: {WORLDS[gpus][1]} on "
        f"{WORLDS[gpus][2]} ({len(runs)} seeds)",
        "",
        "| arm | within 2% of full-size study | regret vs full-size study (median, max) "
        "| within 2% of best | regret vs best (median, max) | GPU-hours (median) "
        "| share of full-size study's (median) | trials (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    plan = statistics.median(1 - r["plan"][0] / r[REFERENCE][0] for r in runs)
    for arm in (a for a in runs[0] if a != "best"):
        vs_full = [1 - r[arm][0] / r[REFERENCE][0] for r in runs]
        vs_best = [1 - r[arm][0] / r["best"][0] for r in runs]
        hours = statistics.median(r[arm][1] for r in runs)
        share = statistics.median(r[arm][1] / r[REFERENCE][1] for r in runs)
        within = sum(v <= WITHIN for v in vs_full)
        lines.append(
            f"| {arm} | {within} of {len(runs)} "
            f"| {statistics.median(vs_full):+.1%}, {max(vs_full):+.1%} "
            f"| {sum(v <= WITHIN for v in vs_best)} of {len(runs)} "
            f"| {statistics.median(vs_best):.1%}, {max(vs_best):.1%} "
            f"| {hours:,.1f} | {share:.1%} | {statistics.median(r[arm][2] for r in runs):g} |"
        )
        if arm.startswith("slice"):
            met = within >= 0.9 * len(runs) and share <= 1 / 8
            met = met and statistics.median(vs_full) < plan
            verdicts.append(f"{arm}: {'met' if met else 'not met'}")
    goal = (
        "Goal (within 2% of the full-size study's winner in at least 90% of seeds, median "
        "GPU-hours at most 1/8 of its, median regret below the plan's): "
    )
    return [*lines, "", goal + "; ".join(verdicts) + ".", "", *needed(runs, needs)]


Arms = dict[str, tuple[float, float, float]]
Needs = dict[str, tuple[int, tuple[float, ...]]]
"""Per ideal arm: how many of its top configs, launched at full size, it takes to launch one
within 2% of the full-size study's winner, and the GPU-hours of a full-size launch of each
config, in its order."""
NEEDED_SHARE = 0.9
"""The share of seeds in which the launches an ideal slice needs find a config within 2%."""


def needed(runs: list[Arms], needs: list[Needs]) -> list[str]:
    """What each ideal slice needs to hold a config within 2% of the full-size study's winner
    in `NEEDED_SHARE` of the seeds: that many full-size launches of its top configs, and
    their GPU-hours against the full-size study's (median over the seeds)."""
    lines = []
    for arm in needs[0]:
        ranks = sorted(n[arm][0] for n in needs)
        k = ranks[math.ceil(NEEDED_SHARE * len(ranks)) - 1]
        share = statistics.median(
            sum(n[arm][1][:k]) / r[REFERENCE][1] for r, n in zip(runs, needs, strict=True)
        )
        lines.append(f"- {arm}: its top {k} at full size, {share:.0%} of the GPU-hours")
    return [
        f"What reading the slice perfectly would need to hold a config within {WITHIN:.0%} of the "
        f"full-size study's winner in {NEEDED_SHARE:.0%} of seeds (the full-size launches of "
        "its top configs, and their GPU-hours as a share of the full-size study's, median):",
        "",
        *lines,
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--worlds", default="1024,8192")
    parser.add_argument("--scales", default="moderate,harsh")
    parser.add_argument(
        "--confirm-full", type=int, default=2, help="leaders confirmed at full size, at most"
    )
    parser.add_argument("--out", type=Path, default=REPO / "results/benchmarks/slice.md")
    args = parser.parse_args()
    started = time.monotonic()
    sections = []
    for scale in (SCALES[name] for name in args.scales.split(",")):
        for gpus in (int(g) for g in args.worlds.split(",")):
            runs, needs = [], []
            for seed in range(args.seeds):
                arms, needs_of = one_seed(gpus, seed, scale, args.confirm_full)
                runs.append(arms)
                needs.append(needs_of)
                shown = {k: round(v[0] / arms[REFERENCE][0], 3) for k, v in arms.items()}
                print(scale.name, gpus, seed, shown, flush=True)
            sections += table(gpus, scale, runs, needs)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text("\n".join(_head(args, started) + sections))
    print(f"wrote {args.out}")


def _head(args: argparse.Namespace, started: float) -> list[str]:
    return [
        "# Tuning on a slice (SIMULATED worlds)",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by `.venv/bin/python -m "
        f"benchmarks.slice --seeds {args.seeds} --worlds {args.worlds} --scales "
        f"{args.scales} --confirm-full {args.confirm_full}` in "
        f"{time.monotonic() - started:.0f} s on a shared 2-core machine. "
        + " ".join(__doc__.split("\n\n")[0].split())
        + f" Studies marked converged (and the slice studies) search until the guided "
        f"search converges, {CONVERGED_CAP} trials at most; 'full-8' is the default "
        "budget of 8 trials. Scale effects: "
        + "; ".join(
            f"{s.name}: DP traffic x(nodes/4)^{s.dp_exponent}, x{s.spine} beyond 32 nodes, "
            f"stragglers {s.straggler:.0%} per doubling"
            for s in SCALES.values()
        )
        + ".",
        "",
    ]


if __name__ == "__main__":
    main()


def _winner(study: optuna.Study) -> Standing | None:
    """The study's winner, as its verdict names it."""
    verdict = decide(study)
    return verdict.winner if verdict is not None else None
