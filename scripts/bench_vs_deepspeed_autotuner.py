"""autotune beside DeepSpeed's own autotuner, on the same unmodified DeepSpeed script.

Both tune tests/data/user_scripts/ds_train.py (a GPT of about 7M parameters: width 256,
4 layers, vocabulary 8192, 128 tokens) on 2 gloo ranks with a global batch of 32:
- DeepSpeed: `deepspeed --autotuning tune` in its fast mode (ZeRO 0-3 x micro-batch), with
  `max_train_batch_size` 32 so it keeps the global batch; on a CPU it needs LOCAL_SIZE=2.
- autotune: `autotune run -- ds_train.py ...` with its defaults (no --model: it reads the
  model in its trial of the script's own config, as DeepSpeed profiles the model first).
Then both winners are re-measured by the same harness (autotune's hook around the script,
20 measured steps), interleaved A B A B ..., and compared by median step time.

Writes results/bench/vs_deepspeed_autotuner.md. About 15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import yaml

from autotune.launchers.local import LocalLauncher
from autotune.problem import load_problem
from autotune.space import TrainConfig
from autotune.trial.folder import run as run_trial
from autotune.trial.spec import StepPlan

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "user_scripts" / "ds_train.py"
SHAPE = ["--width", "256", "--layers", "4", "--vocab", "8192", "--seq", "128", "--steps", "60"]
MODEL = {  # the same shape, for re-measuring the picks through autotune's hook
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "ffn_hidden_size": 1024,
    "vocab_size": 8192,
    "seq_length": 128,
    "global_batch_size": 32,
    "precision": "fp32",
}
USER_CONFIG: dict[str, Any] = {
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 0},
    "steps_per_print": 1_000_000,
}
COPIED_CONFIG = {
    **USER_CONFIG,
    "train_micro_batch_size_per_gpu": 16,
    "zero_optimization": {"stage": 3},
}
"""A poor starting point: a config copied from a large model's job (ZeRO 3, the largest
micro-batch), so that autotune cannot win by measuring the user's config first."""
VARIANTS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "autotune run": (USER_CONFIG, ()),
    "autotune run, copied config": (COPIED_CONFIG, ()),
    "autotune run --no-confirm": (USER_CONFIG, ("--no-confirm",)),
}
"""Each autotune run: the script's ds_config.json and the options beside the defaults. The
last skips confirmation: its pick rests on one launch each, as DeepSpeed's does."""
BIN = Path(sys.executable).parent
OUT_NAME = "vs_deepspeed_autotuner.md"


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DS_ACCELERATOR": "cpu",
        "LOCAL_SIZE": "2",
    }


def run_deepspeed_autotuner(work: Path) -> tuple[float, int, dict[str, int]]:
    config = {
        **USER_CONFIG,
        "autotuning": {
            "enabled": True,
            "fast": True,
            "metric": "throughput",
            "max_train_batch_size": 32,
            "overwrite": True,
        },
    }
    (work / "ds_autotune.json").write_text(json.dumps(config, indent=2))
    start = time.monotonic()
    done = subprocess.run(
        [str(BIN / "deepspeed"), "--autotuning", "tune", "--num_gpus", "2", "ds_train.py",
         *SHAPE, "--deepspeed_config", "ds_autotune.json"],
        cwd=work, env=environment(), capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    wall = time.monotonic() - start
    (work / "deepspeed_autotuner.log").write_text(done.stdout + done.stderr)
    optimal = json.loads((work / "autotuning_results" / "ds_config_optimal.json").read_text())
    experiments = len(list((work / "autotuning_exps").glob("*.json")))
    pick = {
        "zero": int(optimal.get("zero_optimization", {}).get("stage", 0)),
        "mbs": int(optimal["train_micro_batch_size_per_gpu"]),
    }
    return wall, experiments, pick


def run_autotune(
    work: Path, users: dict[str, object], options: tuple[str, ...]
) -> tuple[float, int, dict[str, object], float]:
    """Wall time, trials, the pick, and when the pick's trial had finished (from the start),
    for the script with `users` as its ds_config.json and `options`, in the folder `work`."""
    work.mkdir(exist_ok=True)
    shutil.copy(SCRIPT, work / "ds_train.py")
    (work / "ds_config.json").write_text(json.dumps(users, indent=2))
    began = datetime.now()
    start = time.monotonic()
    done = subprocess.run(
        [str(BIN / "autotune"), "run", "--cluster", "local:2",
         "--results", str(work / "results"), "--study", "bench", *options,
         "--", "ds_train.py", *SHAPE, "--deepspeed_config", "ds_config.json"],
        cwd=work, env=environment(), capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    wall = time.monotonic() - start
    (work / "autotune.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"autotune run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    best = yaml.safe_load((work / "results" / "bench" / "best" / "best.yaml").read_text())
    study = optuna.load_study(
        study_name="bench", storage=f"sqlite:///{work / 'results' / 'bench' / 'study.db'}"
    )
    trials = sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get("kind"))
    found = min(
        t.datetime_complete
        for t in study.get_trials(deepcopy=False)
        if t.datetime_complete and t.user_attrs.get("config") == best["config"]
    )  # the pick was measured, so some trial has its config
    return wall, trials, best["config"], (found - began).total_seconds()


def remeasure(work: Path, picks: dict[str, dict[str, object]], repeats: int) -> dict:
    """Each pick's step times, measured by autotune's hook, interleaved."""
    os.chdir(work)
    command = ["ds_train.py", *SHAPE, "--deepspeed_config", "ds_config.json"]
    problem = load_problem("deepspeed", str(work / "model.yaml"), "local:2", command=command)
    steps = StepPlan(measured_steps=20, precision=0.0, profile=False)  # all 20, every time
    times: dict[str, list[float]] = {name: [] for name in picks}
    for round_ in range(repeats):
        for name, knobs in picks.items():
            config = TrainConfig(**{**knobs, "dp": 2})
            folder = work / "remeasure" / f"{name}-{round_}"
            record = run_trial(
                problem.trial_spec(config, steps), problem.engine, LocalLauncher(), folder, 900
            )
            if record.kind != "ok" or record.result is None:
                raise SystemExit(f"re-measuring {name}: {record.kind}: {record.error}")
            times[name].append(record.result.step_time_s)
    return times


def report(
    out: Path,
    ds: tuple,
    runs: dict[str, tuple[float, int, dict[str, object], float]],
    times: dict[str, list[float]],
) -> None:
    ds_wall, ds_n, ds_pick = ds
    med = {name: statistics.median(t) for name, t in times.items()}
    spread = {name: (min(t), max(t)) for name, t in times.items()}
    tokens = MODEL["global_batch_size"] * MODEL["seq_length"]
    rows = [
        "| tuner | its user's config | wall time | experiments | per experiment "
        "| pick found at | pick | re-measured step time (median, min-max) | tokens/s "
        "| speed vs DeepSpeed's pick |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    shipped = (
        USER_CONFIG["zero_optimization"]["stage"],
        USER_CONFIG["train_micro_batch_size_per_gpu"],
    )
    entries = [("DeepSpeed autotuner (fast)", shipped, ds_wall, ds_n, None, ds_pick)]
    for name, (wall, n, config, found) in runs.items():
        users = VARIANTS[name][0]
        start = users["zero_optimization"]["stage"], users["train_micro_batch_size_per_gpu"]
        entries.append((name, start, wall, n, found, config))
    for name, (zero, mbs), wall, n, found, pick in entries:
        lo, hi = spread[name]
        at = "-" if found is None else f"{found:.0f} s ({found / ds_wall:.2f}x)"
        rows.append(
            f"| {name} | zero={zero}, mbs={mbs} | {wall:.0f} s ({wall / ds_wall:.2f}x) | {n} "
            f"| {wall / n:.1f} s | {at} | zero={pick['zero']}, mbs={pick['mbs']} | "
            f"{med[name] * 1000:.1f} ms ({lo * 1000:.1f}-{hi * 1000:.1f}) | "
            f"{tokens / med[name]:,.0f} | {med['DeepSpeed autotuner (fast)'] / med[name]:.2f}x |"
        )
    text = "\n".join(
        [
            "# autotune beside DeepSpeed's autotuner",
            "",
            "Made by `scripts/bench_vs_deepspeed_autotuner.py`: the same unmodified DeepSpeed "
            "script (`tests/data/user_scripts/ds_train.py`, a GPT of width 256, 4 layers, "
            "vocabulary 8192, 128 tokens; global batch 32) on 2 gloo ranks of this 2-core "
            "machine, tuned by `deepspeed --autotuning tune` (fast mode, "
            "`max_train_batch_size` 32) and by `autotune run -- ...` (defaults: the user's "
            "config first, in the run that reads the model (no `--model`), then the guided "
            "search, 4 trials for a user's command, run in a forked pool (each trial a fresh "
            "process forked from ranks that imported DeepSpeed once), trials measured until "
            "their step time's interval is within the between-trial spread (at least 2%; 5% "
            "before the repeats say) or they cannot win, confirmation of leaders by unprofiled "
            "repeats), once with the script's ds_config.json as "
            "shipped and once with a config copied from a large model's job (ZeRO 3, "
            "micro-batch 16), so that measuring the user's config first cannot be the whole "
            "story, and once with `--no-confirm`, whose pick rests on one launch of each "
            "config, as DeepSpeed's does. The picks were then re-measured by the same harness "
            "(autotune's hook, 20 "
            f"measured steps), interleaved, {args_repeats(times)} times each. Measured, not "
            "simulated. Wall times and the time at which autotune's pick had been measured "
            "are also given as a share of DeepSpeed's wall time (goal: at most 0.33x).",
            "",
            *rows,
            "",
            "DeepSpeed's autotuner tunes the micro-batch at the ZeRO stage the user's config "
            "names. On this noisy machine runs of one config differ by up to about 20%: the "
            "min-max ranges say whether two picks are apart.",
            "",
        ]
    )
    out.write_text(text)
    print(text)


def args_repeats(times: dict[str, list[float]]) -> int:
    return min(len(t) for t in times.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "results/bench" / OUT_NAME)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-vs-ds-"))
    shutil.copy(SCRIPT, work / "ds_train.py")
    (work / "ds_config.json").write_text(json.dumps(USER_CONFIG, indent=2))
    (work / "model.yaml").write_text(yaml.safe_dump(MODEL))
    ds = run_deepspeed_autotuner(work)
    print(f"DeepSpeed autotuner: {ds[0]:.0f} s, {ds[1]} experiments, pick {ds[2]}", flush=True)
    runs = {}
    for i, (name, (users, options)) in enumerate(VARIANTS.items()):
        runs[name] = run_autotune(work / f"autotune-{i}", users, options)
        wall, n, pick, found = runs[name]
        print(f"{name}: {wall:.0f} s, {n} trials, pick {pick} at {found:.0f} s", flush=True)
    picks = {
        "DeepSpeed autotuner (fast)": ds[2],
        **{name: {k: v for k, v in r[2].items() if k != "dp"} for name, r in runs.items()},
    }
    report(args.out, ds, runs, remeasure(work, picks, args.repeats))
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
