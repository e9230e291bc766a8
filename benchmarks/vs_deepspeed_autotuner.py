"""autotune beside DeepSpeed's own autotuner, on the same unmodified DeepSpeed script.

Both tune tests/data/user_scripts/ds_train.py (a GPT of about 7M parameters: width 256,
4 layers, vocabulary 8192, 128 tokens) on 2 gloo ranks with a global batch of 32:
- DeepSpeed: `deepspeed --autotuning tune` in its fast mode (ZeRO 0-3 x micro-batch), with
  `max_train_batch_size` 32 so it keeps the global batch; on a CPU it needs LOCAL_SIZE=2.
- autotune: `autotune run -- ds_train.py ...` with its defaults (no --model: it reads the
  model in its trial of the script's own config, as DeepSpeed profiles the model first).
Then DeepSpeed's pick, each autotune run's pick, and the config each autotune run led with at
a third of DeepSpeed's wall time are re-measured by the same harness (autotune's hook around
the script, 20 measured steps), interleaved A B C A B C ... with the order rotated each
round, and compared by median step time and round by round.

Writes results/bench/vs_deepspeed_autotuner.md. Runs for tens of minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from autotune.launchers.local import LocalLauncher
from autotune.problem import load_problem
from autotune.runner import run as run_trial
from autotune.space import TrainConfig, config_key
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.trial.spec import StepPlan

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "user_scripts" / "ds_train.py"
SHAPE = ["--width", "256", "--layers", "4", "--vocab", "8192", "--seq", "128", "--steps", "60"]
MODEL: dict[str, Any] = {  # the same shape, for re-measuring the picks through autotune's hook
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


def run_deepspeed_autotuner(work: Path) -> tuple[float, int, str]:
    """One run of DeepSpeed's autotuner in a folder of its own: its wall time, its number of
    experiments and its pick's key."""
    work.mkdir(exist_ok=True)
    shutil.copy(SCRIPT, work / "ds_train.py")
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
    pick = TrainConfig(
        dp=2,
        zero=int(optimal.get("zero_optimization", {}).get("stage", 0)),
        mbs=int(optimal["train_micro_batch_size_per_gpu"]),
    )
    return wall, experiments, key_of(pick.as_dict())


@dataclass(frozen=True)
class AutotuneRun:
    """One `autotune run` of the script: its wall time, its trials, its pick and every
    measurement it took, in order."""

    wall_s: float
    trials: int
    pick: str
    """The picked config's key (`key_of`)."""
    pick_found_s: float
    """When the pick's first trial had finished, from the start."""
    measured: tuple[tuple[float, str, float], ...]
    """Each completed measurement: when it finished (from the start), its config's key,
    its tokens/s."""

    def leader_at(self, seconds: float) -> str | None:
        """The config autotune would have named had it stopped then: the best geometric mean
        over the measurements finished by then (None before any)."""
        logs: dict[str, list[float]] = defaultdict(list)
        for at, key, tokens_per_s in self.measured:
            if at <= seconds:
                logs[key].append(math.log(tokens_per_s))
        return max(logs, key=lambda k: statistics.fmean(logs[k]), default=None)


def key_of(knobs: dict[str, Any]) -> str:
    """A config's key (the study's `config_key`) from its knobs as a study or DeepSpeed's pick
    gives them."""
    return config_key(TrainConfig(**knobs))


def label(key: str) -> str:
    """The config's ZeRO stage and the knobs it sets away from their defaults."""
    config = TrainConfig(**json.loads(key))
    knobs = {k: v for k, v in config.differs_from_default().items() if k not in ("dp", "zero")}
    return ",".join([f"zero={config.zero}", *(f"{k}={v}" for k, v in knobs.items())])


def run_autotune(work: Path, users: dict[str, object], options: tuple[str, ...]) -> AutotuneRun:
    """The script with `users` as its ds_config.json, tuned with `options` in `work`."""
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
    trials = study.get_trials(deepcopy=False)
    measured = tuple(
        sorted(
            ((t.datetime_complete - began).total_seconds(), key_of(config), t.value)
            for t in trials
            if t.state == TrialState.COMPLETE and t.value and t.datetime_complete
            and (config := TrialAttrs.of(t).config_values) is not None
        )
    )  # fmt: skip
    pick = key_of(best["config"])
    return AutotuneRun(
        wall_s=wall,
        trials=sum(1 for t in trials if TrialAttrs.of(t).kind),
        pick=pick,
        pick_found_s=min(at for at, key, _ in measured if key == pick),  # the pick was measured
        measured=measured,
    )


def remeasure(work: Path, configs: list[str], repeats: int) -> dict[str, list[float]]:
    """Each config's step times, measured by autotune's hook, interleaved, the order rotated
    each round (a round's first trial can run apart from the rest), each
    trial in a pool of its own that is closed before the next."""
    os.chdir(work)
    command = ["ds_train.py", *SHAPE, "--deepspeed_config", "ds_config.json"]
    problem = load_problem("deepspeed", str(work / "model.yaml"), "local:2", command=command)
    steps = StepPlan(measured_steps=20, precision=0.0, profile=False)  # all 20, every time
    times: dict[str, list[float]] = {key: [] for key in configs}
    for round_ in range(repeats):
        shift = round_ % len(configs)
        for i, key in enumerate(configs[shift:] + configs[:shift]):
            config = TrainConfig(**json.loads(key))
            folder = work / "remeasure" / f"{round_}-{i}"
            launcher = LocalLauncher()
            try:
                spec = problem.trial_spec(config, steps)
                record = run_trial(spec, problem.engine, launcher, folder, 900)
            finally:
                launcher.close()
            if record.kind != "ok" or record.result is None:
                raise SystemExit(f"re-measuring {label(key)}: {record.kind}: {record.error}")
            times[key].append(record.result.step_time_s)
    return times


def ratios(ds: list[float], ours: list[float]) -> tuple[float, list[float]]:
    """A config's speed against DeepSpeed's pick: the ratio of median step times, and the
    per-round ratios."""
    rounds = [theirs / mine for theirs, mine in zip(ds, ours, strict=True)]
    return statistics.median(ds) / statistics.median(ours), rounds


def speed(pairs: list[tuple[str, str]], times: dict[str, list[float]]) -> str:
    """The speed of each run's config against its repetition's DeepSpeed pick: the range of
    the runs' median ratios, and in brackets the least and most per-round ratio."""
    found = [ratios(times[ds], times[ours]) for ds, ours in pairs]
    medians = [m for m, _ in found]
    rounds = [r for _, each in found for r in each]
    return f"{span(medians, '{:.2f}')}x ({min(rounds):.2f}-{max(rounds):.2f}x)"


def span(values: list[float], form: str) -> str:
    """`a` or `a-b`: the least and most of `values` in `form`."""
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}-{high}"


def _picks(keys: list[str]) -> str:
    """The configs the runs picked: one label when they agree, else each with its count."""
    counts = {key: keys.count(key) for key in dict.fromkeys(keys)}
    if len(counts) == 1:
        return label(keys[0])
    return "; ".join(f"{label(k)} ({n} of {len(keys)})" for k, n in counts.items())


def report(
    out: Path,
    ds: list[tuple[float, int, str]],
    runs: dict[str, list[AutotuneRun]],
    times: dict[str, list[float]],
    repeats: int,
) -> None:
    walls = [wall for wall, _, _ in ds]
    third = statistics.fmean(walls) / 3
    tokens = MODEL["global_batch_size"] * MODEL["seq_length"]
    first_pick = ds[0][2]

    def start(users: dict[str, Any]) -> str:
        zero, mbs = users["zero_optimization"]["stage"], users["train_micro_batch_size_per_gpu"]
        return f"zero={zero}, mbs={mbs}"

    tuners = [
        "| tuner | its user's config | wall time | experiments | per experiment | pick "
        "| pick found at | pick's speed vs DeepSpeed's (per round) |",
        "|---|---|---|---|---|---|---|---|",
        f"| DeepSpeed autotuner (fast) | {start(USER_CONFIG)} | {span(walls, '{:.0f}')} s "
        f"(1.00x) | {span([float(n) for _, n, _ in ds], '{:.0f}')} "
        f"| {span([w / n for w, n, _ in ds], '{:.1f}')} s | {_picks([k for *_, k in ds])} | - "
        f"| {speed([(first_pick, k) for *_, k in ds], times)} |",
    ]
    leaders = [
        "| tuner | leader at a third of DeepSpeed's wall time "
        "| its speed vs DeepSpeed's pick (per round) |",
        "|---|---|---|",
    ]
    for name, each in runs.items():
        pairs = [(d[2], run.pick) for d, run in zip(ds, each, strict=True)]
        wall = [run.wall_s for run in each]
        found = [run.pick_found_s for run in each]
        against = list(zip(ds, each, strict=True))
        tuners.append(
            f"| {name} | {start(VARIANTS[name][0])} | {span(wall, '{:.0f}')} s "
            f"({span([r.wall_s / d[0] for d, r in against], '{:.2f}')}x) "
            f"| {span([float(r.trials) for r in each], '{:.0f}')} "
            f"| {span([r.wall_s / r.trials for r in each], '{:.1f}')} s "
            f"| {_picks([r.pick for r in each])} | {span(found, '{:.0f}')} s "
            f"({span([r.pick_found_s / d[0] for d, r in against], '{:.2f}')}x) "
            f"| {speed(pairs, times)} |"
        )
        led = [(d[2], run.leader_at(d[0] / 3)) for d, run in zip(ds, each, strict=True)]
        kept = [(theirs, ours) for theirs, ours in led if ours is not None]
        leaders.append(
            f"| {name} | {_picks([ours for _, ours in kept]) if kept else 'none measured'}"
            f"{'' if len(kept) == len(led) else f' ({len(led) - len(kept)} runs: none)'} "
            f"| {speed(kept, times) if kept else '-'} |"
        )
    measured = [
        "| config | re-measured step time (median, min-max) | tokens/s |",
        "|---|---|---|",
        *(
            f"| {label(key)} | {statistics.median(t) * 1000:.1f} ms "
            f"({min(t) * 1000:.1f}-{max(t) * 1000:.1f}) | {tokens / statistics.median(t):,.0f} |"
            for key, t in times.items()
        ),
    ]
    text = "\n".join(
        [
            "# autotune beside DeepSpeed's autotuner",
            "",
            f"Generated {datetime.now().isoformat(timespec='seconds')} by "
            "`benchmarks/vs_deepspeed_autotuner.py`: the same unmodified DeepSpeed "
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
            "config, as DeepSpeed's does. Every config named below was then re-measured by the "
            f"same harness (autotune's hook, 20 measured steps), interleaved, {repeats} times "
            "each, the order rotated each round, each trial in a pool of its own. Measured, not "
            "simulated. Speeds are DeepSpeed's pick's median step time over the config's, with "
            "the least and most of the per-round ratios (the two measured in the same round): "
            "above 1 is faster than DeepSpeed's pick.",
            "",
            "## The tuners",
            "",
            *tuners,
            "",
            "## What autotune had found by a third of DeepSpeed's wall time",
            "",
            f"The config each autotune run would have named had it been stopped then (a third "
            f"of the wall time of DeepSpeed's run in the same repetition; {third:.0f} s on "
            "average): the best mean over the measurements it had finished (goal: at least as "
            "fast as DeepSpeed's pick, within the spread).",
            "",
            *leaders,
            "",
            "## The configs re-measured",
            "",
            *measured,
            "",
            "DeepSpeed's autotuner tunes the micro-batch at the ZeRO stage the user's config "
            "names. On this noisy machine runs of one config differ by up to about 20%, and "
            "its speed from one hour to the next by as much: each figure is the least-most "
            f"over {len(walls)} runs of each tuner (one of each per repetition, in turn), the "
            "per-round ratios say whether one config was faster in every round.",
            "",
        ]
    )
    out.write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4, help="re-measurements of each pick")
    parser.add_argument("--runs", type=int, default=2, help="runs of each tuner")
    parser.add_argument("--out", type=Path, default=REPO / "results/bench" / OUT_NAME)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-vs-ds-"))
    shutil.copy(SCRIPT, work / "ds_train.py")
    (work / "ds_config.json").write_text(json.dumps(USER_CONFIG, indent=2))
    (work / "model.yaml").write_text(yaml.safe_dump(MODEL))
    ds: list[tuple[float, int, str]]
    runs: dict[str, list[AutotuneRun]]
    ds, runs = [], {name: [] for name in VARIANTS}
    for r in range(args.runs):  # one run of each tuner per repetition, in turn
        ds.append(run_deepspeed_autotuner(work / f"deepspeed-{r}"))
        print(f"DeepSpeed autotuner: {ds[-1][0]:.0f} s, {ds[-1][1]} experiments, "
              f"pick {ds[-1][2]}", flush=True)  # fmt: skip
        for i, (name, (users, options)) in enumerate(VARIANTS.items()):
            run = run_autotune(work / f"autotune-{r}-{i}", users, options)
            runs[name].append(run)
            print(
                f"{name}: {run.wall_s:.0f} s, {run.trials} trials, pick {label(run.pick)} "
                f"at {run.pick_found_s:.0f} s",
                flush=True,
            )
    leaders = [
        run.leader_at(d[0] / 3) for each in runs.values() for d, run in zip(ds, each, strict=True)
    ]
    configs = [*(d[2] for d in ds), *(r.pick for each in runs.values() for r in each)]
    distinct = list(dict.fromkeys([*configs, *filter(None, leaders)]))
    report(args.out, ds, runs, remeasure(work, distinct, args.repeats), args.repeats)
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
