"""Loss parity on real studies of the tiny user scripts: no false `differs`, every script whose
training follows the micro-batch flagged, and what parity costs.

Runs `autotune run` (local:2, random sampler, a seed per study, --no-confirm; DeepSpeed's knobs
in `DS_SPACE`, the helper's in plain_space.yaml) on copies of
tests/data/user_scripts: the DeepSpeed script, the Hugging Face Trainer script and the
`autotune.step` helper script, each as written (their configs across ZeRO 0-3, buckets,
overlap and micro-batch/accumulation at a fixed global batch must all be `same`) and with its
learning rate set per sample of the micro-batch (`--lr-per-sample`: every config whose
micro-batch differs from the reference must be `differs` and none exported). Writes
results/bench/parity.md and every trial's verdict to results/benchmarks/parity_studies.json.

    .venv/bin/python scripts/bench_parity.py [--studies 14] [--flagged 6] [--trials 5]
    .venv/bin/python scripts/bench_parity.py --report-only   # the report from the kept JSON
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import optuna
import torch
import yaml

from autotune.rank.loss import StepLoss
from autotune.study import parity
from autotune.study.trial_attrs import TrialAttrs

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "data" / "user_scripts"
HF_ARGS = [
    "--output_dir", "out", "--max_steps", "60", "--report_to", "none", "--save_strategy", "no",
    "--use_cpu", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
    "--deepspeed", "hf_ds_config.json",
]  # fmt: skip
DS_SPACE = (
    "engine: deepspeed\nknobs:\n  zero: [0, 1, 2, 3]\n  mbs: [1, 2, 4, 8]\n"
    "  reduce_bucket: [50000000, 500000000]\n  allgather_bucket: [50000000, 500000000]\n"
    "  overlap_comm: [false, true]\n"
)
"""ZeRO 0-3, buckets, overlap and the micro-batch at the scripts' global batch of 16 (the
user's own values join it)."""
SPACED = ["--space", "ds_space.yaml"]
CASES = {
    "deepspeed": (
        SPACED,
        ["ds_train.py", "--deepspeed_config", "ds_config.json"],
        "--lr-per-sample",
    ),
    "huggingface": (SPACED, ["hf_train.py", *HF_ARGS], "--lr_per_sample"),
    "helper": (
        ["--engine", "torch", "--space", "plain_space.yaml"],
        ["plain_train.py", "--steps", "60"],
        "--lr-per-sample",
    ),
}
LR_PER_SAMPLE = {"deepspeed": "5e-3", "huggingface": "1e-3", "helper": "1e-3"}
"""The flagged scripts' learning rate per sample of the micro-batch."""


def study(case: str, seed: int, flagged: bool, trials: int, root: Path) -> dict[str, object]:
    """One study of `case`, and what it says of every trial's parity."""
    options, command, flag = CASES[case]
    workdir = root / f"{case}-{seed}-{int(flagged)}"
    shutil.copytree(SCRIPTS, workdir)
    (workdir / "ds_space.yaml").write_text(DS_SPACE)
    if flagged:
        command = [*command, flag, LR_PER_SAMPLE[case]]
    argv = [
        sys.executable, "-m", "autotune", "run", *options, "--cluster", "local:2",
        "--trials", str(trials), "--no-confirm", "--sampler", "random", "--seed", str(seed),
        "--study", "s", "--results", str(workdir / "results"), "--", *command,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "DS_ACCELERATOR": "cpu"}
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{case} seed {seed}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    folder = workdir / "results" / "s"
    loaded = optuna.load_study(study_name="s", storage=f"sqlite:///{folder / 'study.db'}")
    rows, verdict_s = verdicts(loaded)
    exported = yaml.safe_load((folder / "best" / "best.yaml").read_text())
    line = next((x for x in done.stdout.splitlines() if x.startswith("parity:")), "")
    return {
        "case": case, "seed": seed, "flagged": flagged, "wall_s": wall,
        "verdict_s": verdict_s, "trials": rows, "exported": exported["config"],
        "exported_parity": exported.get("parity"), "summary": line,
    }  # fmt: skip


def verdicts(study: optuna.Study) -> tuple[list[dict[str, object]], float]:
    """Each trial's config, kind and curve against the reference; the seconds the tuner's
    parity check takes for all of them, done again here as the study did it."""
    runs = parity.reference_runs(study)
    reference = TrialAttrs.of(runs[0]).config_values if runs else {}
    rows, spent = [], 0.0
    for t in study.get_trials(deepcopy=False):
        attrs = TrialAttrs.of(t)
        if attrs.config_values is None or not attrs.losses:
            continue
        started = time.perf_counter()
        found = parity.of_trial(study, t.number, attrs.losses, "fp32")
        spent += time.perf_counter() - started
        changed = {k: v for k, v in attrs.config_values.items() if (reference or {}).get(k) != v}
        rows.append(
            {
                "number": t.number, "kind": attrs.kind, "changed": changed,
                "steps": len(attrs.losses),
                "largest": found.largest if found else None,
                "floor": found.floor if found else None,
            }
        )  # fmt: skip
    return rows, spent


def rank_cost(steps: int = 2000, accumulation: int = 2) -> float:
    """Seconds the rank-side loss recording adds per optimizer step (no collective)."""
    tally, loss = StepLoss(), torch.tensor(6.2)
    started = time.perf_counter()
    for _ in range(steps):
        for _ in range(accumulation):
            tally.add_micro(loss, summed=False)
        tally.end_step()
    return (time.perf_counter() - started) / steps


def judged(row: dict[str, object], flagged: bool) -> str:
    """right, false_differs or missed for one trial."""
    changed = row["changed"]
    assert isinstance(changed, dict)
    follows = flagged and "mbs" in changed
    differs = row["kind"] == parity.DIFFERS
    if differs == follows:
        return "right"
    return "false_differs" if differs else "missed"


def report(results: list[dict[str, object]], per_step_s: float, trials: int) -> str:
    lines = [
        "# Loss parity on real studies of the tiny user scripts",
        "",
        f"`scripts/bench_parity.py`, {datetime.now():%Y-%m-%d %H:%M}: `autotune run` on "
        f"local:2 (gloo, a shared 2-core machine), {trials} trials a study, random sampler "
        "(a seed per study), `--no-confirm`, fp32. As written, every config must be `same`; "
        "with `--lr-per-sample` (the learning rate follows the micro-batch) every config "
        "whose micro-batch differs from the reference must be `differs` and none exported.",
        "",
        "| script | flagged | studies | trials | changed mbs | changed zero | changed "
        "buckets | changed overlap | false differs | missed | exported a differing "
        "config | studies flagged | largest same (x floor) | smallest differs (x floor) | "
        "study wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        for flagged in (False, True):
            group = [r for r in results if r["case"] == case and r["flagged"] == flagged]
            if group:
                lines.append(_row(case, flagged, group))
    walls = [float(r["wall_s"]) for r in results]  # type: ignore[arg-type]
    checks = [float(r["verdict_s"]) for r in results]  # type: ignore[arg-type]
    lines += [
        "",
        f"What parity adds: no trial (each study ran its {trials}); the tuner's checks "
        f"took {1000 * max(checks):.1f} ms at most in a study ({1000 * sum(checks):.0f} ms "
        f"over all {len(results)}, against {sum(walls):.0f} s of studies); a rank records "
        f"a step's loss in {1e6 * per_step_s:.1f} us, and once per trial averages the "
        "curve over the ranks (one all-reduce).",
        "",
    ]
    return "\n".join(lines)


def _row(case: str, flagged: bool, group: list[dict[str, object]]) -> str:
    rows = [row for r in group for row in r["trials"]]  # type: ignore[attr-defined]
    marks = [judged(row, flagged) for row in rows]
    count = {k: sum(1 for row in rows if k in row["changed"]) for k in ("mbs", "zero")}
    buckets = sum(1 for row in rows if {"reduce_bucket", "allgather_bucket"} & set(row["changed"]))
    overlap = sum(1 for row in rows if "overlap_comm" in row["changed"])
    bad_export = sum(1 for r in group if (r["exported_parity"] or {}).get("verdict") == "differs")
    same = [row["largest"] / row["floor"] for row in rows if row["kind"] == "ok" and row["floor"]]
    diff = [row["largest"] / row["floor"] for row in rows if row["kind"] == parity.DIFFERS]
    wall = sum(float(r["wall_s"]) for r in group) / len(group)  # type: ignore[arg-type]
    flaggable = [r for r in group if any("mbs" in t["changed"] for t in _trials(r))]
    caught = [r for r in flaggable if any(t["kind"] == parity.DIFFERS for t in _trials(r))]
    studies = f"{len(caught)} of {len(flaggable)} with a changed mbs" if flagged else "-"
    return (
        f"| {case} | {'yes' if flagged else 'no'} | {len(group)} | {len(rows)} | "
        f"{count['mbs']} | {count['zero']} | {buckets} | {overlap} | "
        f"{marks.count('false_differs')} | {marks.count('missed')} | {bad_export} | {studies} | "
        f"{max(same, default=0):.2f} | {min(diff, default=0):.2f} | {wall:.0f} |"
    )


def _trials(result: dict[str, object]) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], result["trials"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=14, help="studies as written, in all")
    parser.add_argument("--flagged", type=int, default=6, help="studies of flagged scripts")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--report-only", action="store_true", help="from the kept studies")
    args = parser.parse_args()
    raw = REPO / "results" / "benchmarks" / "parity_studies.json"
    if args.report_only:
        results = json.loads(raw.read_text())
    else:
        results = run_studies(args.studies, args.flagged, args.trials)
        raw.write_text(json.dumps(results, indent=1, default=str) + "\n")
    text = report(results, rank_cost(), args.trials)
    (REPO / "results" / "bench" / "parity.md").write_text(text)
    print(text)


def run_studies(studies: int, flagged: int, trials: int) -> list[dict[str, object]]:
    """`studies` of the scripts as written and `flagged` of the flagged ones, in turn."""
    cases = list(CASES)
    plan = [(cases[i % 3], i, False) for i in range(studies)]
    plan += [(cases[i % 3], 100 + i, True) for i in range(flagged)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, seed, is_flagged in plan:
            results.append(study(case, seed, is_flagged, trials, Path(tmp)))
            print(f"{case} seed {seed} flagged={is_flagged}: {results[-1]['summary']}", flush=True)
    return results


if __name__ == "__main__":
    main()
