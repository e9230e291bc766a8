"""Measure every valid config of a small space of the tiny workload, for replayed benchmarks.

For each engine, runs a real study with `--sampler grid` (enumeration order) until every
config has a verdict, then writes the replay table results/benchmarks/sweep_<engine>.csv:
one row per config (knob columns, step_time_s, its spread, status, wall_s).

    .venv/bin/python scripts/sweep.py [--engines deepspeed torch]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pandas as pd
import yaml

from autotune.study.record.trial_attrs import TrialAttrs

REPO = Path(__file__).resolve().parents[1]
SPACES = {
    "deepspeed": {
        "pp": [1, 2],
        "zero": [0, 1, 2, 3],
        "mbs": [1, 2, 4],
        "recompute": ["none", "full"],
    },
    "torch": {
        "tp": [1, 2],
        "pp": [1, 2],
        "zero": [0, 2, 3],
        "mbs": [2, 4],
        "recompute": ["none", "full"],
    },
}


def sweep(engine: str, workdir: Path) -> pd.DataFrame:
    space = workdir / f"{engine}.yaml"
    space.write_text(yaml.safe_dump({"engine": engine, "knobs": SPACES[engine]}))
    study = f"sweep-{engine}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "run",
            "--engine",
            engine,
            "--cluster",
            "local:2",
            "--space",
            str(space),
            "--sampler",
            "grid",
            "--trials",
            "1000",
            "--study",
            study,
            "--results",
            str(workdir),
            "--measured-steps",
            "5",
            "--timeout-per-trial",
            "5m",
            "--no-early-stop",  # a sweep measures every config in full
        ],
        check=True,
        cwd=REPO,
    )
    loaded = optuna.load_study(
        study_name=study, storage=f"sqlite:///{workdir / study / 'study.db'}"
    )
    rows = []
    for t in loaded.get_trials(
        states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    ):
        a = TrialAttrs.of(t)
        config = a.config_values or {}
        rows.append(
            {
                **{
                    k: config[k]
                    for k in ("tp", "pp", "vpp", "dp", "zero", "mbs", "recompute", "sp")
                },
                "step_time_s": a.step_time_s,
                "step_time_stdev_s": a.step_time_stdev_s,
                "status": a.kind,
                "wall_s": round(a.wall_s or 0.0, 2),
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=list(SPACES))
    args = parser.parse_args()
    out = REPO / "results" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines:
            table = sweep(engine, Path(tmp))
            path = out / f"sweep_{engine}.csv"
            table.to_csv(path, index=False)
            print(f"wrote {path}: {len(table)} configs, {int((table.status == 'ok').sum())} ok")


if __name__ == "__main__":
    main()
