"""Expert and context parallel layouts against the published recipes: a simulated megatron
study of Mixtral 8x7B and of Llama 3 70B at 64K tokens on 64 H100 (`dgx-h100:8`), and the
model's breakdown of the study's winner beside the published recipe's layout.

SIMULATED: the studies' trials are the model's predictions, not measurements, so this shows
where the model's ranking puts the recipes, not that the recipes are slower. Writes
results/bench/layouts_2026.md.

    .venv/bin/python -m benchmarks.layouts_2026
"""

from __future__ import annotations

import tempfile
from datetime import datetime
from pathlib import Path

import yaml

from autotune.engines import get_engine
from autotune.estimate.calibration import default_calibration
from autotune.estimate.predict import Estimate, estimate
from autotune.estimate.ranking import memory_verdicts
from autotune.problem import load_problem
from autotune.space import TrainConfig
from autotune.space.config import parse_overrides
from autotune.specs import Cluster, Workload
from benchmarks.peak_memory import run_measured

REPO = Path(__file__).resolve().parents[1]
CLUSTER, ENGINE, TRIALS = "dgx-h100:8", "megatron", 16
SPACE = str(REPO / "scripts/spaces/megatron_2026.yaml")  # the default, with TP and EP overlap
OVERLAPS = "zero=1,overlap_comm=true,overlap_param_gather=true"
RECIPES = {
    # Megatron-Bridge's Mixtral 8x7B performance config on 64 H100: TP1 PP4 VPP8 EP8, mbs 1.
    "mixtral-8x7b": ("Megatron-Bridge Mixtral 8x7B, 64 H100", f"pp=4,vpp=8,ep=8,{OVERLAPS}"),
    # NeMo's llama3_70b_64k recipe runs TP8 PP4 CP4 on 128 GPUs; on 64 its nearest layout
    # halves CP (TP8 PP4 CP2, VPP5 as the 8K recipe); its TP collectives overlap the GEMMs
    # (CommOverlapConfig(tp_comm_overlap=True)).
    "llama3-70b-64k": (
        "NeMo llama3_70b_64k (TP8 PP4 CP4 on 128 GPUs), halved to CP2 for 64",
        f"tp=8,pp=4,vpp=5,cp=2,sp=true,tp_comm_overlap=true,recompute=full,{OVERLAPS}",
    ),
}
PARTS: tuple[str, ...] = (
    "compute_s",
    "recompute_s",
    "tp_comm_s",
    "pp_bubble_s",
    "pp_p2p_s",
    "cp_comm_s",
)
PARTS += ("ep_comm_s", "dp_exposed_s")


def _problem_parts(model: str) -> tuple[Workload, Cluster, str]:
    problem = load_problem(ENGINE, model, CLUSTER, SPACE)
    return problem.workload, problem.cluster, ENGINE


def predicted(model: str, knobs: str) -> tuple[TrainConfig, Estimate]:
    config = load_problem(ENGINE, model, CLUSTER, SPACE).config(parse_overrides(knobs))
    w, cluster, engine = _problem_parts(model)
    return config, estimate(w, config, cluster, get_engine(engine).traits)


def row(name: str, config: TrainConfig, e: Estimate) -> str:
    step = e.step.as_dict()
    parts = " | ".join(f"{step[p]:.2f}" for p in PARTS)
    return (
        f"| {name} | {config.label()} | {e.tokens_per_s / 64:,.0f} | {parts} | "
        f"{e.step.total_s:.2f} | {e.memory.total / 2**30:.1f} |"
    )


def study(model: str, results: Path) -> list[str]:
    wall, gib = run_measured(
        ["run", "--engine", ENGINE, "--model", model, "--cluster", CLUSTER,
         "--launcher", "simulate", "--trials", str(TRIALS), "--study", "layouts",
         "--space", SPACE,
         "--results", str(results)],
        REPO,
    )  # fmt: skip
    best = yaml.safe_load((results / "layouts" / "best" / "best.yaml").read_text())
    source, recipe_knobs = RECIPES[model]
    winner = TrainConfig(**best["config"])
    w, cluster, engine = _problem_parts(model)
    winner_estimate = estimate(w, winner, cluster, get_engine(engine).traits)
    recipe, recipe_estimate = predicted(model, recipe_knobs)
    problem = load_problem(ENGINE, model, CLUSTER, SPACE)
    cal = default_calibration("hopper", problem.engine.traits)
    ranked = memory_verdicts(
        problem.workload,
        problem.cluster,
        problem.engine.traits,
        problem.enumerate().require_some().valid,
        cal,
    )
    rank = ranked.fastest_first.row_of(recipe)
    return [
        f"### {model} on {CLUSTER} (64 H100), {TRIALS} simulated trials, {wall:.1f} s, "
        f"{gib:.2f} GiB",
        "",
        f"| layout | config | tokens/s/GPU | {' | '.join(p.removesuffix('_s') for p in PARTS)} "
        "| step s | memory GiB |",
        "|---|---|---|" + "---|" * len(PARTS) + "---|---|",
        row("study's winner", winner, winner_estimate),
        row(f"recipe: {source}", recipe, recipe_estimate),
        "",
        f"The recipe's layout ranks {rank + 1 if rank is not None else 'not'} of "
        f"{len(ranked)} predicted to fit; the winner is "
        f"{winner_estimate.tokens_per_s / recipe_estimate.tokens_per_s:.2f}x the recipe by "
        "the model.",
        "",
    ]


def main() -> None:
    lines = [
        "# 2026 layouts: expert and context parallel studies beside the recipes (SIMULATED)",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        "`.venv/bin/python -m benchmarks.layouts_2026` on this machine (2 cores): "
        f"`autotune run --engine {ENGINE} --model M --cluster {CLUSTER} --launcher simulate "
        f"--trials {TRIALS} --space scripts/spaces/megatron_2026.yaml` (the default space with "
        "`tp_comm_overlap` and `ep_comm_overlap`), then `autotune estimate` of its winner and "
        "of the recipe's layout. Seconds per step by part (Megatron's default calibration on "
        "Hopper).",
        "",
    ]
    for model in RECIPES:
        with tempfile.TemporaryDirectory() as results:
            lines += study(model, Path(results))
        print("\n".join(lines[-8:]), flush=True)
    out = REPO / "results" / "bench" / "layouts_2026.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
