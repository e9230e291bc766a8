"""Where a trial's wall time goes, for the tiny workload on this machine: a cold launch per
trial against a pool, side by side.

Runs real trials (both built-in engines and a user's unmodified DeepSpeed script,
tests/data/user_scripts/ds_train.py at its default size, a few configs, several repeats),
each config once cold (torchrun, Python, imports and the process group for the one trial)
and once in a pool kept per engine (launchers/warm_pool.py): warm for the built-in engines,
forked for the user's script (a fresh process per trial from ranks that imported DeepSpeed
once), interleaved, and splits each trial's wall time into: launch and imports,
initialisation (process group, model, engine; the script's own start), warm-up, measured
steps, the profiled step, and teardown (result gathering, process exit or the pool's
answer). A pool's first trial pays launch and imports like a cold one; it opens each pool and
is shown apart. Writes results/bench/trial_overhead.md.

    .venv/bin/python -m benchmarks.trial_overhead [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
from datetime import datetime
from functools import cache
from pathlib import Path

from autotune.launchers import LaunchOutcome, get_launcher
from autotune.launchers.base import Launcher
from autotune.problem import Problem, load_problem
from autotune.runner import prepare
from autotune.space import parse_overrides
from autotune.trial.spec import StepPlan

REPO = Path(__file__).resolve().parents[1]
USERS = "deepspeed script"
"""The user's own DeepSpeed script, tuned as `autotune run -- ds_train.py ...` tunes it."""
SCRIPTS = REPO / "tests" / "data" / "user_scripts"
SCRIPT_MODEL = (
    "num_layers: 2\nhidden_size: 128\nnum_attention_heads: 2\nffn_hidden_size: 512\n"
    "vocab_size: 512\nseq_length: 64\nglobal_batch_size: 16\nprecision: fp32\n"
)
"""ds_train.py's default model, so the run need not read it."""
CONFIGS = [
    ("deepspeed", "zero=1,mbs=4"),
    ("deepspeed", "zero=3,mbs=4"),
    ("torch", "zero=0,mbs=4"),
    ("torch", "zero=3,mbs=4"),
    (USERS, "zero=0,mbs=4"),
    (USERS, "zero=2,mbs=8"),
]
PHASES = [
    "launch + imports",
    "initialisation",
    "warm-up",
    "measured steps",
    "profiled step",
    "teardown",
]
MODES = ("cold", "pooled")


def split(outcome: LaunchOutcome) -> dict[str, float]:
    result = outcome.result
    assert result is not None
    p = result.phases_s
    inside = sum(p.values())
    return {
        "launch + imports": p["started"] + p["imported"],
        "initialisation": p["initialized"],
        "warm-up": p["warmed_up"],
        "measured steps": p["measured"],
        "profiled step": p["profiled"],
        "teardown": p["finished"] + max(outcome.wall_s - inside, 0.0),
        "total": outcome.wall_s,
    }


@cache
def problem_of(case: str, root: Path) -> Problem:
    """The case's problem; the user's script is copied into a project folder under `root`."""
    if case != USERS:
        return load_problem(case, "tiny", "local:2")
    project = root / "project"
    project.mkdir()
    for name in ("ds_train.py", "ds_config.json"):
        shutil.copy(SCRIPTS / name, project / name)
    (project / "model.yaml").write_text(SCRIPT_MODEL)
    os.chdir(project)  # the user's command runs from their folder
    command = ["ds_train.py", "--deepspeed_config", "ds_config.json"]
    return load_problem("deepspeed", "model.yaml", "local:2", command=command)


def run_trial(launcher: Launcher, case: str, config: str, folder: Path, pooled: bool):
    problem = problem_of(case, folder.parent)
    spec = problem.trial_spec(problem.config(parse_overrides(config)), StepPlan())
    request = prepare(spec, problem.engine, launcher, folder, time_limit_s=900)
    assert request.pool is not None
    outcome = launcher.run(request if pooled else dataclasses.replace(request, pool=None))
    if outcome.kind != "ok":
        sys.exit(f"trial {case} {config} failed: {outcome.kind} {outcome.error}")
    return split(outcome)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/trial_overhead.md")
    args = parser.parse_args()
    args.out = args.out.resolve()  # the user's script is run from its own folder
    rows: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    openings: dict[str, dict[str, float]] = {}
    cold = get_launcher("local")
    pools = {engine: get_launcher("local") for engine, _ in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp, cold:
        for engine, config in CONFIGS:  # each pool's first trial: launch and imports paid
            if engine not in openings:
                folder = Path(tmp) / f"open-{engine}"
                openings[engine] = run_trial(pools[engine], engine, config, folder, True)
        for repeat in range(args.repeats):
            for engine, config in CONFIGS:
                for mode in MODES if repeat % 2 == 0 else MODES[::-1]:
                    folder = Path(tmp) / f"{engine}-{config}-{mode}-{repeat}"
                    launcher = pools[engine] if mode == "pooled" else cold
                    split_s = run_trial(launcher, engine, config, folder, mode == "pooled")
                    rows.setdefault((engine, config, mode), []).append(split_s)
                    print(f"{engine:9} {config:14} {mode} {split_s['total']:.2f} s", flush=True)
        for pool in pools.values():
            pool.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, openings, args.repeats))
    print(f"wrote {args.out}")


def report(
    rows: dict[tuple[str, str, str], list[dict[str, float]]],
    openings: dict[str, dict[str, float]],
    repeats: int,
) -> str:
    lines = [
        "# Trial overhead (tiny workload, 2 gloo processes): cold launches against pools",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        f"`.venv/bin/python -m benchmarks.trial_overhead --repeats {repeats}`; "
        "medians over the repeats, seconds, cold and pooled trials of each config interleaved "
        "(the order alternating per repeat). Default step plan: warm-up until a step is no "
        "longer more than 10% faster than the one before (2 to 12 steps, at most 15 s; the "
        "settled steps count as measured, and so does their time), measured steps until the "
        "step time's 95% interval is within 2% (3 to 8 steps), 1 profiled step (in a study "
        "only a trial that could win is profiled). A warm rank collects the frozen objects "
        "too only when the next trial is not already waiting. Pooled: a warm pool for the "
        "built-in engines, a forked one for the user's script (`tests/data/user_scripts/"
        "ds_train.py`, 2 layers of width 128, run unmodified; its ranks imported torch, "
        "DeepSpeed and its compiled ops once).",
        "",
        "| engine | config | mode | " + " | ".join(PHASES) + " | total | measured share |",
        "|---|---|---|" + "---|" * (len(PHASES) + 2),
    ]
    shares: dict[str, list[float]] = {mode: [] for mode in MODES}
    totals: dict[tuple[str, str], dict[str, float]] = {}
    for (engine, config, mode), runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in [*PHASES, "total"]}
        share = med["measured steps"] / med["total"]
        shares[mode].append(share)
        totals.setdefault((engine, config), {})[mode] = med["total"]
        lines.append(
            f"| {engine} | {config} | {mode} | "
            + " | ".join(f"{med[k]:.2f}" for k in PHASES)
            + f" | {med['total']:.2f} | {share:.1%} |"
        )
    speedups = [t["cold"] / t["pooled"] for t in totals.values()]
    per_engine = {
        engine: sum(
            statistics.median(r["measured steps"] for r in runs)
            for (e, _, mode), runs in rows.items()
            if e == engine and mode == "pooled"
        )
        / sum(t["pooled"] for (e, _), t in totals.items() if e == engine)
        for engine in dict.fromkeys(e for e, _ in totals)
    }
    lines += [
        "",
        f"Share of trial time spent in measured steps: cold {min(shares['cold']):.1%} to "
        f"{max(shares['cold']):.1%}, pooled {min(shares['pooled']):.1%} to "
        f"{max(shares['pooled']):.1%}. A pooled trial takes {min(speedups):.1f}x to "
        f"{max(speedups):.1f}x less wall time than a cold one. Pooled, per engine (its configs' "
        "trials together): "
        + ", ".join(f"{engine} {share:.1%}" for engine, share in per_engine.items())
        + " of the time measuring.",
        "",
        "Each pool's first trial (paid once per study and world, like a cold trial):",
        "",
        "| engine | launch + imports | initialisation | total |",
        "|---|---|---|---|",
        *(
            f"| {engine} | {o['launch + imports']:.2f} | {o['initialisation']:.2f} | "
            f"{o['total']:.2f} |"
            for engine, o in openings.items()
        ),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
