"""Simulated studies at 10,000-GPU scale: `autotune run --launcher simulate` of llama3.1-405b
(126 layers) on 1,024 and 2,048 dgx-h100 nodes, end to end to the exported launch files.

Each study runs as the command a user types, in a fresh process: its wall time and peak
memory, the time before the first trial (the plan), and the time per proposal, read from the
study's own trial timestamps (a simulated trial takes no time, so the gap from one trial's
end to the next one's start is the proposal: refit, predict, choose). SIMULATED: the trials
are the model's predictions, not measurements. Writes results/bench/scale_study.md.

    .venv/bin/python -m benchmarks.scale_study
"""

from __future__ import annotations

import statistics
import tempfile
from datetime import datetime
from pathlib import Path

import optuna
import yaml

from benchmarks.peak_memory import run_measured

REPO = Path(__file__).resolve().parents[1]
MODEL, ENGINE, TRIALS = "llama3.1-405b", "megatron", 12
NODES = (1024, 2048)


def study(nodes: int, results: Path) -> list[str]:
    cluster = f"dgx-h100:{nodes}"
    start_wall = datetime.now()
    wall, gib = run_measured(
        ["run", "--engine", ENGINE, "--model", MODEL, "--cluster", cluster,
         "--launcher", "simulate", "--trials", str(TRIALS), "--study", "scale",
         "--results", str(results)],
        REPO,
    )  # fmt: skip
    folder = results / "scale"
    trials = optuna.load_study(
        study_name="scale", storage=f"sqlite:///{folder / 'study.db'}"
    ).get_trials(deepcopy=False)
    ran = [t for t in trials if t.datetime_start and t.datetime_complete]
    gaps = [
        (b.datetime_start - a.datetime_complete).total_seconds()  # type: ignore[operator]
        for a, b in zip(ran, ran[1:], strict=False)
    ]
    assert len(gaps) >= 1, f"the study on {cluster} ran {len(ran)} trials"
    plan = (ran[0].datetime_start - start_wall).total_seconds()  # type: ignore[operator]
    best = yaml.safe_load((folder / "best" / "best.yaml").read_text())
    c = best["config"]
    layout = f"TP{c['tp']} PP{c['pp']} VPP{c['vpp']} CP{c['cp']} DP{c['dp']}"
    exported = sorted(p.name for p in (folder / "best").iterdir())
    return [
        f"| {nodes * 8:,} | {len(trials)} | {wall:.1f} | {gib:.2f} | "
        f"{plan:.1f} | {statistics.median(gaps):.2f} | {max(gaps):.2f} | {layout} | "
        f"{best['source']} | {', '.join(exported)} |"
    ]


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lines = [
        "# simulated studies at scale (SIMULATED trials)",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        "`.venv/bin/python -m benchmarks.scale_study` on this machine (2 cores): "
        f"`autotune run --engine {ENGINE} --model {MODEL} --cluster dgx-h100:N --launcher "
        f"simulate --trials {TRIALS}`, one fresh process per study. Seconds. `plan` is the "
        "time from the command's start to its first trial; a proposal is the gap between "
        "one trial's end and the next one's start.",
        "",
        "| GPUs | trials | wall | peak GiB | plan | proposal median | proposal max "
        "| best layout | source | exported |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for nodes in NODES:
        with tempfile.TemporaryDirectory() as results:
            lines += study(nodes, Path(results))
        print(lines[-1], flush=True)
    lines += [
        "",
        "Published beside it (shared/data/published_moe_cp_runs.csv, Megatron-Bridge 26.06, "
        "1,024 H100, FP8, global batch 1,536): TP8 PP8 VPP8 CP2, the 126 layers split "
        "unevenly as here. The preset's batch is the Llama 3 paper's (2,048 sequences of "
        "8,192) in bf16, not the recipe's FP8.",
    ]
    out = REPO / "results/bench/scale_study.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
