"""Loss parity on real studies of scripts written for it: no false `differs` on a safe script
at any trial length, every broken script flagged, never exported and its cause named, and a
search that learns the move that breaks parity.

The scripts (scripts/parity_scripts/): two DeepSpeed scripts (a GPT with a seeded
DistributedSampler, a warm-up/cosine schedule and clipping from the ds_config; an MLP whose
own AdamW and LambdaLR go to deepspeed.initialize), two Hugging Face Trainer scripts (GPT-2;
a model of its own) and two loops tuned through autotune.step (a GPT under DDP; an MLP with
SGD). Each runs with dropout 0.1 or none, in fp32 or bf16, as written (safe: at a fixed
global batch every config of the space trains the same model) or broken four ways (`--broken`:
its learning rate per sample, its shuffle seeded with the micro-batch, one batch of the
micro-batch's size reused, its own accumulation so the global batch follows the micro-batch).

Each study is `autotune run` on local:2 (gloo), guided, `--no-confirm`, its trials measuring
`--measured-steps` 5, 16 or 48 (so 5 to about 60 steps, the user's runs longer). Safe studies
must flag nothing; a broken study must flag a config that moves the micro-batch (where one
ran), export none, and name the micro-batch in its summary; and of its trials after the first
flag, at most 2 may move the micro-batch again while at least 3 tune other knobs at the
user's. Writes results/bench/parity.md and every study to results/benchmarks/parity_studies.json
(kept: `--only` runs some studies again, `--report-only` rewrites the report).

    .venv/bin/python -m benchmarks.parity                   # every study (about 2 h here)
    .venv/bin/python -m benchmarks.parity --only ds_gpt      # one script's studies
    .venv/bin/python -m benchmarks.parity --smoke            # one short study, no files
    .venv/bin/python -m benchmarks.parity --resume          # those not in the JSON yet
    .venv/bin/python -m benchmarks.parity --report-only
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
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import yaml

from autotune.study.record.trial_attrs import PARITY_RESEED, TrialAttrs
from autotune.study.verdict import parity
from autotune.study.verdict.parity_cause import FLAGGED

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts" / "parity_scripts"
RAW = REPO / "results" / "benchmarks" / "parity_studies.json"
REPORT = REPO / "results" / "bench" / "parity.md"
DS_SPACE = (
    "engine: deepspeed\nknobs:\n  zero: [0, 1, 2, 3]\n  mbs: [1, 2, 4, 8]\n"
    "  reduce_bucket: [50000000, 500000000]\n  overlap_comm: [false, true]\n"
)
"""ZeRO 0-3, buckets, overlap and the micro-batch at the scripts' global batch (the user's
micro-batch is 2)."""
STEP_SPACE = (
    "engine: torch\nknobs:\n  mbs: [1, 2, 4, 8]\n  ddp_bucket_mb: [1, 5, 25, 100]\n"
    "yours:\n  mbs: {mbs}\n  ddp_bucket_mb: 25\n"
)
HF_COMMON = [
    "--output_dir", "out", "--max_steps", "200", "--report_to", "none", "--save_strategy",
    "no", "--use_cpu", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
    "4", "--lr_scheduler_type", "cosine", "--warmup_steps", "8", "--max_grad_norm", "1.0",
    "--logging_steps", "1000", "--deepspeed", "hf_ds_config.json",
]  # fmt: skip


@dataclass(frozen=True)
class Script:
    name: str
    engine: str
    command: tuple[str, ...]
    space: str
    bf16: tuple[str, ...] = ("--bf16",)
    model: tuple[str, ...] = ()
    """`--model` where autotune cannot read the script's model (no token embedding)."""


SCRIPTS_RUN = (
    Script("ds_gpt", "deepspeed", ("ds_gpt.py", "--deepspeed_config", "ds_config.json"), DS_SPACE),
    Script(
        "ds_mlp",
        "deepspeed",
        ("ds_mlp.py", "--deepspeed_config", "ds_mlp_config.json"),
        DS_SPACE,
        model=("--model", "mlp_model.yaml"),
    ),
    Script(
        "hf_gpt2", "deepspeed", ("hf_gpt2.py", *HF_COMMON, "--learning_rate", "2e-3"), DS_SPACE
    ),
    Script(
        "hf_mlp",
        "deepspeed",
        ("hf_mlp.py", *HF_COMMON, "--learning_rate", "3e-3"),
        DS_SPACE,
        model=("--model", "mlp_model.yaml"),
    ),
    Script("step_ddp", "torch", ("step_ddp.py",), STEP_SPACE.format(mbs=2)),
    Script("step_mlp", "torch", ("step_mlp.py",), STEP_SPACE.format(mbs=4)),
)
BROKEN = ("lr", "order", "fixed", "accumulation")
LENGTHS = (5, 16, 48)
"""Measured steps a trial takes at most: trials of 5 to about 60 steps."""
STARTED = f"{datetime.now():%Y-%m-%d %H:%M}"


@dataclass(frozen=True)
class Plan:
    script: str
    variant: str
    """safe, or how the script is broken."""
    dropout: float
    bf16: bool
    measured: int

    @property
    def name(self) -> str:
        precision = "bf16" if self.bf16 else "fp32"
        return f"{self.script}-{self.variant}-d{self.dropout}-{precision}-{self.measured}"


def plans() -> list[Plan]:
    """Every safe script at each length with and without dropout, in each precision at
    alternate lengths; every broken one at 16 steps, in each precision for alternate ways."""
    found = []
    for i, s in enumerate(SCRIPTS_RUN):
        for j, measured in enumerate(LENGTHS):
            for dropout in (0.1, 0.0):
                found.append(Plan(s.name, "safe", dropout, (i + j) % 2 == 1, measured))
        for j, broken in enumerate(BROKEN):
            found.append(Plan(s.name, broken, 0.1, (i + j) % 2 == 1, 16))
    return found


def run_study(plan: Plan, root: Path, trials: int = 8) -> dict[str, Any]:
    """One study of `plan` and what it says of each trial's parity."""
    script = next(s for s in SCRIPTS_RUN if s.name == plan.script)
    workdir = root / plan.name
    shutil.copytree(SCRIPTS, workdir)
    (workdir / "space.yaml").write_text(script.space)
    command = [*script.command, "--dropout", str(plan.dropout)]
    command += list(script.bf16) if plan.bf16 else []
    command += ["--broken", plan.variant] if plan.variant != "safe" else []
    engine = ["--engine", "torch"] if script.engine == "torch" else []
    engine += list(script.model)
    argv = [
        sys.executable, "-m", "autotune", "run", *engine, "--space", "space.yaml",
        "--cluster", "local:2", "--trials", str(trials), "--no-confirm",
        "--measured-steps", str(plan.measured), "--study", "s",
        "--results", str(workdir / "results"), "--", *command,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "DS_ACCELERATOR": "cpu"}
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    folder = workdir / "results" / "s"
    if done.returncode != 0 or not (folder / "study.db").exists():
        tail = (done.stdout + done.stderr)[-3000:]
        return {**asdict(plan), "name": plan.name, "error": tail, "wall_s": wall}
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{folder / 'study.db'}")
    best = folder / "best" / "best.yaml"
    exported = yaml.safe_load(best.read_text()) if best.exists() else {}
    summary = [line for line in done.stdout.splitlines() if line.startswith(("parity:", "  "))]
    return {
        **asdict(plan), "name": plan.name, "run": STARTED, "wall_s": wall,
        "trials": trial_rows(study), "exported": exported.get("config"),
        "yours": users_config(study),
        "exported_parity": exported.get("parity"), "summary": summary,
    }  # fmt: skip


def users_config(study: optuna.Study) -> dict[str, Any] | None:
    runs = parity.reference_runs(study)
    return TrialAttrs.of(runs[0]).config_values if runs else None


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """Each trial that ran: its config's moves from the user's, kind, steps, and its curve's
    worst step against the band (as a multiple of that step's floor)."""
    yours = users_config(study)
    precision = str(study.user_attrs["workload"]["precision"])
    band = parity.study_band(study, precision)
    rows = []
    for t in study.get_trials(deepcopy=False):
        attrs = TrialAttrs.of(t)
        if attrs.config_values is None or attrs.kind is None:
            continue
        found = parity.judge(attrs.losses, band) if band and attrs.losses else None
        moved = {k: v for k, v in attrs.config_values.items() if (yours or {}).get(k) != v}
        rows.append(
            {
                "number": t.number, "kind": attrs.kind, "moved": moved,
                "reference": attrs.config_key == study.user_attrs.get("users_config"),
                "reseeded": PARITY_RESEED in t.user_attrs, "steps": len(attrs.losses),
                "repeats": attrs.confirms,
                "stopped_for": attrs.stopped_for, "losses": list(attrs.losses),
                "ratio": found.largest / found.floor if found else None,
            }
        )  # fmt: skip
    return rows


def judged(result: dict[str, Any]) -> dict[str, Any]:
    """What a study shows: false flags, catches, misses, the export, the cause, the search."""
    rows = [r for r in result["trials"] if not r["reference"]]
    broken = result["variant"] != "safe"
    flagged = [r for r in rows if r["kind"] in FLAGGED]
    moved_mbs = [r for r in rows if "mbs" in r["moved"]]
    exported = result.get("exported") or {}
    yours = result.get("yours")
    out: dict[str, Any] = {
        "false_differs": 0 if broken else len(flagged),
        "flaggable": bool(moved_mbs) if broken else False,
        "caught": any("mbs" in r["moved"] for r in flagged) if broken else False,
        "missed": sum(1 for r in moved_mbs if r["kind"] not in FLAGGED) if broken else 0,
        "exported_moved": broken and yours is not None and "mbs" in _moved(exported, result),
        "named": any("the micro-batch" in line for line in result["summary"]),
    }
    if broken and flagged:  # search trials after the first flag (a repeat is no search)
        first = min(r["number"] for r in flagged)
        after = [r for r in rows if r["number"] > first and r.get("repeats") is None]
        out["after_moved"] = sum(1 for r in after if "mbs" in r["moved"])
        out["after_kept"] = sum(1 for r in after if "mbs" not in r["moved"] and r["moved"])
    return out


def _moved(exported: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The knobs the export sets otherwise than the user's config."""
    yours = result.get("yours") or {}
    return {k: v for k, v in exported.items() if yours.get(k) != v}


def _label(moved: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in moved.items())


def _against(result: dict[str, Any]) -> str:
    """What the summary says of the export against the user's own config."""
    for line in result["summary"]:
        text = line.strip()
        if "your own config" in text and not text.startswith("1.00x"):
            return text.split(" (")[0] if "x your own config" in text else text
    return "-"


def report(results: list[dict[str, Any]]) -> str:
    ok = [r for r in results if "error" not in r]
    safe = [r for r in ok if r["variant"] == "safe"]
    broken = [r for r in ok if r["variant"] != "safe"]
    lines = [
        "# Loss parity on real studies of scripts written for it",
        "",
        f"`benchmarks/parity.py`, report of {datetime.now():%Y-%m-%d %H:%M} (studies run "
        f"{', '.join(sorted({str(r.get('run')) for r in ok}))}): `autotune run` on local:2 "
        "(gloo, a shared 2-core machine), 8 trials a study, guided, `--no-confirm`. "
        f"{len({r['script'] for r in ok})} scripts (two DeepSpeed, two Trainer, two "
        "autotune.step) with and without dropout, fp32 and bf16, as written (safe) and broken "
        f"four ways: {len({(r['script'], r['variant'], r['dropout'], r['bf16']) for r in ok})} "
        f"distinct scripts in {len(ok)} studies"
        + (
            f" ({len(results) - len(ok)} failed to run: listed at the end)"
            if len(ok) < len(results)
            else ""
        )
        + ".",
        "",
        "## Safe scripts: no false `differs` at any length",
        "",
        "| measured steps | trial steps | studies | trials judged | false differs | largest "
        "(x floor) |",
        "|---|---|---|---|---|---|",
    ]
    for measured in LENGTHS:
        group = [r for r in safe if r["measured"] == measured]
        rows = [
            t for r in group for t in r["trials"] if not t["reference"] and t["ratio"] is not None
        ]
        steps = [t["steps"] for t in rows] or [0]
        false = sum(judged(r)["false_differs"] for r in group)
        largest = max((t["ratio"] for t in rows), default=0.0)
        lines.append(
            f"| {measured} | {min(steps)}-{max(steps)} | {len(group)} | {len(rows)} | {false} | "
            f"{largest:.2f} |"
        )
    lines += [
        "",
        "## Broken scripts: flagged, never exported, the cause named, the search taught",
        "",
        "| script | broken | studies | moved the mbs | flagged | exported a moved mbs | "
        "named the micro-batch | after the first flag: moved mbs (max) | kept mbs, other "
        "knobs (min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for script in SCRIPTS_RUN:
        for variant in BROKEN:
            group = [r for r in broken if r["script"] == script.name and r["variant"] == variant]
            if not group:
                continue
            marks = [judged(r) for r in group]
            flaggable = [m for m in marks if m["flaggable"]]
            after = [m for m in marks if "after_moved" in m]
            lines.append(
                f"| {script.name} | {variant} | {len(group)} | {len(flaggable)} | "
                f"{sum(m['caught'] for m in flaggable)} | "
                f"{sum(m['exported_moved'] for m in marks)} | "
                f"{sum(m['named'] for m in marks if m['caught'])} of "
                f"{sum(m['caught'] for m in marks)} | "
                f"{max((m['after_moved'] for m in after), default='-')} | "
                f"{min((m['after_kept'] for m in after), default='-')} |"
            )
    marks = [judged(r) for r in broken]
    flaggable = [m for m in marks if m["flaggable"]]
    caught = sum(m["caught"] for m in flaggable)
    lines += [
        "",
        f"Totals: safe studies {len(safe)}, false differs "
        f"{sum(judged(r)['false_differs'] for r in safe)}; broken studies {len(broken)}, "
        f"{len(flaggable)} of them ran a config that moves the micro-batch, {caught} flagged "
        f"({100 * caught / max(1, len(flaggable)):.0f}%), "
        f"{sum(m['exported_moved'] for m in marks)} exported a moved micro-batch, "
        f"{sum(m['named'] for m in marks if m['caught'])} of {caught} flagged named the "
        "micro-batch.",
    ]
    others = sorted(
        {
            f"{r['name']}: {part.strip()}"
            for r in broken
            for line in r["summary"]
            if "train another model:" in line
            for part in line.split("train another model:")[1].split(";")
            if "the micro-batch" not in part
        }
    )
    lines += [
        "",
        "The search after the first flag counts search trials only (a winner's check run over "
        "the whole band, and the one-knob trial it may lead to, are no search). Where fewer "
        "than 3 trials kept the micro-batch, the space left fewer configs (ZeRO 0 takes no "
        "overlap; a second convicted knob holds more) and the study says so (`search space "
        "exhausted: every config left that keeps ... ran`). Other moves named in broken "
        "studies: " + ("; ".join(others) or "none") + ".",
    ]
    lines += ["", "## A script that reuses one batch of the micro-batch's size", ""]
    lines += ["| study | exported | against your config |", "|---|---|---|"]
    for r in (r for r in broken if r["variant"] == "fixed"):
        moved = _moved(r.get("exported") or {}, r)
        lines.append(f"| {r['name']} | {_label(moved) or 'your config'} | {_against(r)} |")
    failed = [r for r in results if "error" in r]
    if failed:
        lines += ["", "Studies that failed to run:", ""]
        lines += [
            f"- {r['name']}: {r['error'].splitlines()[-1] if r['error'] else '?'}" for r in failed
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", help="run the studies whose name contains this; keep others")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="one short study, no files")
    parser.add_argument("--resume", action="store_true", help="skip studies the JSON has")
    args = parser.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_study(Plan("step_mlp", "lr", 0.1, False, 5), Path(tmp), trials=3)
        assert "error" not in result, result["error"]
        print(json.dumps(judged(result)))
        return
    kept = json.loads(RAW.read_text()) if RAW.exists() else []
    if not args.report_only:
        todo = [p for p in plans() if args.only is None or args.only in p.name]
        if args.resume:
            done = {r["name"] for r in kept if "error" not in r}
            todo = [p for p in todo if p.name not in done]
        kept = [r for r in kept if r["name"] not in {p.name for p in todo}]
        with tempfile.TemporaryDirectory() as tmp:
            for plan in todo:
                result = run_study(plan, Path(tmp))
                kept.append(result)
                RAW.write_text(json.dumps(kept, indent=1, default=str) + "\n")
                print(
                    plan.name, result.get("summary") or result.get("error", "")[-300:], flush=True
                )
    planned = {p.name for p in plans()}
    text = report([r for r in kept if r["name"] in planned])
    REPORT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
