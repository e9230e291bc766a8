"""How long `autotune plan` takes on large spaces: enumerating the valid configs (rules) and
predicting them (the model), in-process after imports, and the whole command end to end; and
how long a guided search takes per proposal (refit, predict, choose) among a million
candidates.

The enumeration is timed beside a flat walk (every combination built and
checked against every rule), and the table model beside predicting one config at a time
(`estimate`, the same model on a table of one, on a sample), on the same space in the same
run, as ratios. Writes results/bench/plan_speed.md.

    .venv/bin/python -m benchmarks.plan
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from datetime import datetime
from pathlib import Path

import optuna

from autotune.estimate.calibration import default_calibration
from autotune.estimate.collectives import clear_caches
from autotune.estimate.predict import Estimate, estimate
from autotune.estimate.ranking import memory_verdicts
from autotune.problem import Problem, load_problem
from autotune.space import config_key, first_violation
from autotune.space.enumerate import build_config
from autotune.space.pipeline import split_layers
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.study.search.guided.search import GuidedSearch
from benchmarks.peak_memory import run_measured

REPO = Path(__file__).resolve().parents[1]
BLOOM = str(REPO / "tests/data/models/bloom-72l.yaml")
WIDE = str(REPO / "scripts/spaces/megatron_wide.yaml")
PER_CONFIG_SAMPLE = 2000
"""Configs predicted one at a time, to time the per-config path without waiting minutes."""
REPEATS = 3
"""In-process repeats of each plan: a shared machine is noisy."""
PROPOSALS = 6
MEASURED_FIRST = 4
CASES = [
    ("megatron", "llama3-70b", "dgx-h100:128"),
    ("megatron", BLOOM, "dgx-a100:48"),
    ("torch", "llama3-70b", "dgx-h100:128"),
    ("deepspeed", "llama3-70b", "dgx-h100:128"),
    ("torch", "gpt3-175b", "dgx-a100:64"),
    ("torch", "llama3-8b", "dgx-h100:4"),
    ("megatron", "gpt3-175b", "dgx-h100:1024"),
    # expert parallelism's dimensions (ep, etp) beside tp, pp, vpp and the rest
    ("megatron", "mixtral-8x7b", "dgx-h100:8"),
    ("megatron", "qwen3-30b-a3b", "dgx-h100:128"),
]
FLAT_LIMIT = 15_000_000
"""Spaces of more combinations skip the flat walk, which would take many minutes."""


def cold_caches() -> None:
    """Forget what an earlier repeat computed: each repeat pays what a fresh plan pays."""
    clear_caches()
    split_layers.cache_clear()


def flat_enumeration(problem: Problem) -> int:
    """The flat walk: every combination built and checked by every rule; the valid count."""
    names = list(problem.space.values)
    valid = 0
    for combo in itertools.product(*problem.space.values.values()):
        config = build_config(dict(zip(names, combo, strict=True)), problem.cluster.world_size)
        valid += first_violation(config, problem.workload, problem.cluster, problem.rules) is None
    return valid


def timed(engine: str, model: str, cluster: str) -> dict[str, float]:
    """Best of REPEATS of each part, and the median of the in-process total; the flat walk
    and the per-config path once."""
    best: dict[str, float] = {}
    totals = []
    for _ in range(REPEATS):
        cold_caches()
        start = time.perf_counter()
        problem = load_problem(engine, model, cluster)
        found = problem.enumerate()
        enumerated = time.perf_counter()
        cal = default_calibration(problem.cluster.device.generation, problem.engine.traits)
        ranked = memory_verdicts(
            problem.workload, problem.cluster, problem.engine.traits, found.valid, cal
        )
        done = time.perf_counter()
        for part, seconds in (("enumerate", enumerated - start), ("predict", done - enumerated)):
            best[part] = min(best.get(part, float("inf")), seconds)
        totals.append(done - start)
    best["median_total"] = statistics.median(totals)
    best["flat"] = math.nan
    if found.total <= FLAT_LIMIT:
        start = time.perf_counter()
        assert flat_enumeration(problem) == len(found.valid)
        best["flat"] = time.perf_counter() - start
    sample = random.Random(0).sample(range(len(found.valid)), min(PER_CONFIG_SAMPLE, len(ranked)))
    start = time.perf_counter()
    for i in sample:
        estimate(problem.workload, found.valid[i], problem.cluster, problem.engine.traits, cal)
    best["one_by_one"] = (time.perf_counter() - start) / len(sample) * len(found.valid)
    return {**best, "total": found.total, "valid": len(found.valid), "fit": len(ranked)}


def proposals(model: str, cluster: str) -> dict[str, float]:
    """A guided search among the configs of the wide Megatron space that fit: seconds to plan
    the space (in-process, and as a command with its peak memory), to set the search up, and
    per proposal (refit to the trials, predict every candidate, check the stop
    rule, choose) after MEASURED_FIRST measured trials, each proposal then measured. The
    'measurements' are the model's own step times moved by a seeded 10% log-normal error:
    what is timed is the search's arithmetic, not what it finds."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    plans = []
    for _ in range(REPEATS):
        cold_caches()
        start = time.perf_counter()
        problem = load_problem("megatron", model, cluster, WIDE)
        cal = default_calibration(problem.cluster.device.generation, problem.engine.traits)
        valid = problem.enumerate().valid
        ranked = memory_verdicts(
            problem.workload, problem.cluster, problem.engine.traits, valid, cal
        )
        plans.append(time.perf_counter() - start)
    plan_command, plan_gib = command("megatron", model, cluster, WIDE)
    start = time.perf_counter()
    guide = GuidedSearch(problem, ranked.fastest_first, cal, seed=0)
    setup = time.perf_counter() - start
    study = optuna.create_study(direction="maximize")
    rng = random.Random(0)

    def measure(e: Estimate) -> None:
        trial = study.ask()
        trial.set_user_attr("config", e.config.as_dict())
        step = e.step.total_s * math.exp(rng.gauss(0, 0.1))
        trial.set_user_attr("step_time_s", step)
        study.tell(trial, e.tokens_per_s * e.step.total_s / step)

    for i in range(MEASURED_FIRST):
        measure(ranked[i * len(ranked) // MEASURED_FIRST])
    seconds = []
    for _ in range(PROPOSALS):
        start = time.perf_counter()
        trials = study.get_trials(deepcopy=False)
        guide.learn(trials)
        tried = {config_key(TrialAttrs.of(t).config) for t in trials}
        guide.converged(tried, max(t.value or 0.0 for t in trials))
        config = guide.propose(tried)
        seconds.append(time.perf_counter() - start)
        assert config is not None
        measure(estimate(problem.workload, config, problem.cluster, problem.engine.traits, cal))
    return {
        "valid": len(valid),
        "candidates": len(ranked),
        "plan": min(plans),
        "plan_median": statistics.median(plans),
        "plan_command": plan_command,
        "plan_gib": plan_gib,
        "setup": setup,
        "median": statistics.median(seconds),
        "max": max(seconds),
    }


def command(
    engine: str, model: str, cluster: str, space: str | None = None
) -> tuple[float, float]:
    """Seconds and peak resident GiB of `autotune plan` as a command."""
    args = ["plan", "--engine", engine, "--model", model, "--cluster", cluster, "--json"]
    return run_measured(args + (["--space", space] if space else []), REPO)


def main() -> None:
    lines = [
        "# plan speed",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        "`.venv/bin/python -m benchmarks.plan` on this machine (2 cores). Seconds; "
        f"in-process parts best of {REPEATS} (`in-process`: their sum; `median`: the median of "
        "the repeats' totals), each repeat with the model's caches empty. `flat` is "
        "the enumeration the walk replaced (every combination built and checked), timed in "
        "the same run; both find the same configs. `one by one` is the same model predicting "
        f"one config at a time (`estimate`, a table of one), timed on {PER_CONFIG_SAMPLE:,} "
        "of the valid configs and scaled to all of them; `predict` is the table model as a plan "
        "runs it: memory for every valid config, step time for those that fit, ranked. "
        "Goals (issue on plans at scale): megatron llama3-70b on dgx-h100:128 under 0.5 s "
        "in-process; gpt3-175b on 8,192 GPUs and the largest space with the new dimensions "
        "(expert parallelism: mixtral-8x7b, qwen3-30b-a3b) under 5 s and 2 GiB; a guided "
        "proposal under 0.2 s at a million candidates. Spaces of more than "
        f"{FLAT_LIMIT:,} combinations skip the flat walk ('-').",
        "",
        "| engine | model | cluster | configs | valid | fit | enumerate | flat | flat / walk "
        "| predict | one by one | one by one / table | in-process | median | command "
        "| command GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for engine, model, cluster in CASES:
        t = timed(engine, model, cluster)
        seconds, gib = command(engine, model, cluster)
        flat = (
            "- | -"
            if math.isnan(t["flat"])
            else f"{t['flat']:.2f} | {t['flat'] / t['enumerate']:.0f}x"
        )
        lines.append(
            f"| {engine} | {Path(model).stem} | {cluster} | {t['total']:,.0f} | "
            f"{t['valid']:,.0f} | {t['fit']:,.0f} | {t['enumerate']:.2f} | {flat} | "
            f"{t['predict']:.2f} | {t['one_by_one']:.1f} | "
            f"{t['one_by_one'] / t['predict']:.0f}x | {t['enumerate'] + t['predict']:.2f} | "
            f"{t['median_total']:.2f} | {seconds:.2f} | {gib:.2f} |"
        )
        print(lines[-1], flush=True)
    p = proposals("llama3-70b", "dgx-h100:128")
    lines += [
        "",
        "## Guided search: one proposal among a million candidates",
        "",
        "megatron llama3-70b on dgx-h100:128 with `scripts/spaces/megatron_wide.yaml` (more "
        "bucket sizes, recompute depths and NCCL settings than the default space). A proposal "
        "is what the study loop does between trials: refit the model to the trials, predict "
        f"every candidate, check the stop rule, choose; timed for {PROPOSALS} proposals after "
        f"{MEASURED_FIRST} measured trials. Setup (once per study) builds the candidates' "
        "codes and the model's calibration-free parts. `plan`: the space planned in-process "
        f"(best of {REPEATS}, each with the model's caches empty, and the median), and as "
        "`autotune plan --space ...` with its peak memory.",
        "",
        "| valid | candidates (fit) | plan | plan median | plan command | command GiB | setup "
        "| proposal median | proposal max |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {p['valid']:,} | {p['candidates']:,} | {p['plan']:.2f} | {p['plan_median']:.2f} "
        f"| {p['plan_command']:.2f} "
        f"| {p['plan_gib']:.2f} | {p['setup']:.1f} | {p['median']:.3f} | {p['max']:.3f} |",
    ]
    print(lines[-1], flush=True)
    out = REPO / "results/bench/plan_speed.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
