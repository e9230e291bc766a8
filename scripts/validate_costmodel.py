"""Predict every published training run with a complete configuration and compare.

Reads the published runs (autotune/calibration/data/published_runs_public.csv, a copy of
../shared/data's; or --data), converts each source's figure to
one measure (step time in seconds, from the stated step time, from tokens/s, or from TFLOP/s
with the source's own FLOP formula), predicts it with autotune's step-time model, and writes
results/bench/costmodel_validation.md: per row predicted vs published, median absolute
percentage error per source and overall, and Spearman rank correlation within each sweep.

    .venv/bin/python scripts/validate_costmodel.py
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from autotune.calibration import published_moe_cp
from autotune.calibration.fp8_pairs import Fp8Pair, fit_fp8, pairs, source_calibration
from autotune.calibration.published import DATA, Case, cases
from autotune.calibration.published_moe_cp import MoeCpCase
from autotune.engines import get_engine
from autotune.estimate.calibrate import Observation, fit, median_abs_pct_error
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration, default_calibration
from autotune.estimate.predict import estimate
from autotune.specs import Cluster, load_cluster

REPO = Path(__file__).resolve().parents[1]


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = pd.Series(a).rank(), pd.Series(b).rank()
    return float(ra.corr(rb)) if len(a) > 2 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/costmodel_validation.md")
    args = parser.parse_args()
    rows, skipped = [], dict[str, int]()
    observations: dict[str, list[tuple[str, str, Observation]]] = {}
    total = 0
    for c in cases(args.data):
        total += 1
        if not isinstance(c, Case):
            skipped[c] = skipped.get(c, 0) + 1
            continue
        cluster = load_cluster(c.cluster_name)
        observations.setdefault(cluster.device.generation, []).append(
            (
                c.source,
                c.engine,
                Observation(
                    c.workload, cluster, c.config, get_engine(c.engine).traits, c.published_step_s
                ),
            )
        )
        row = compared(c, load_cluster(c.cluster_name), c.engine)
        rows.append({**row, "measure": c.measure})
    frame = pd.DataFrame(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        report(frame, skipped, total) + held_out(observations) + fp8_report() + moe_cp_report()
    )
    text = args.out.read_text()
    print(text.split("## Every row")[0] + "## Held-out" + text.split("## Held-out")[1])


def compared(
    c: Case | MoeCpCase, cluster: Cluster, engine: str, cal: Calibration | None = None
) -> dict[str, Any]:
    """One published run beside the model's prediction of it (with `cal`, else the engine's
    default): a row of a report."""
    pred = estimate(c.workload, c.config, cluster, get_engine(engine).traits, cal).step
    gpus = c.config.tp * c.config.pp * c.config.cp * c.config.dp  # a cluster has whole nodes
    return {
        "row": c.row_id,
        "source": c.source,
        "sweep": c.sweep,
        "model": c.workload.name,
        "gpus": gpus,
        "layout": c.config.label(),
        "published_s": c.published_step_s,
        "predicted_s": pred.total_s,
        "error": pred.total_s / c.published_step_s - 1,
        "published_tps": c.workload.tokens_per_step / c.published_step_s / gpus,
        "predicted_tps": c.workload.tokens_per_step / pred.total_s / gpus,
        "dominant": pred.dominant(),
    }


def report(frame: pd.DataFrame, skipped: dict[str, int], total: int) -> str:
    frame["abs_error"] = frame["error"].abs()
    lines = [
        "# Cost model against published runs",
        "",
        "Made by `.venv/bin/python scripts/validate_costmodel.py`. Each source's figure is "
        "converted to seconds per step (stated step time; tokens/s; or TFLOP/s with the "
        "source's Megatron eq. 3) and predicted by `autotune.estimate.steptime` with the "
        "default calibration.",
        "",
        f"{len(frame)} of {total} rows predicted; skipped: "
        + "; ".join(f"{why} ({n})" for why, n in skipped.items())
        + ".",
        "",
        "| source | rows | median abs error | median signed error "
        "| rank corr of tokens/s/GPU (median over sweeps) |",
        "|---|---|---|---|---|",
    ]
    for source, part in frame.groupby("source"):
        corrs = [
            spearman(list(g["published_tps"]), list(g["predicted_tps"]))
            for _, g in part.groupby("sweep")
            if len(g) > 2
        ]
        corrs = [c for c in corrs if not math.isnan(c)]
        corr = f"{statistics.median(corrs):.2f} ({len(corrs)} sweeps)" if corrs else "-"
        lines.append(
            f"| {source} | {len(part)} | {part['abs_error'].median():.1%} | "
            f"{part['error'].median():+.1%} | {corr} |"
        )
    lines += [
        f"| all | {len(frame)} | {frame['abs_error'].median():.1%} | "
        f"{frame['error'].median():+.1%} | |",
        "",
        "## Every row",
        "",
        frame.drop(columns=["abs_error"]).to_markdown(index=False, floatfmt=".3g"),
        "",
    ]
    return "\n".join(lines)


def held_out(observations: dict[str, list[tuple[str, str, Observation]]]) -> str:
    """Leave one source out: fit each generation's calibration on its other sources' rows
    and predict the source left out, so that no sweep is fitted and tested at once.
    `observations`: per generation, each row's source, engine and observation."""
    lines = [
        "## Held-out error of the calibration (leave one source out)",
        "",
        "The GPU defaults are fitted to these rows (in-sample above; "
        "`scripts/fit_costmodel.py`). Here each source is predicted by a calibration fitted "
        "to the other sources of the same GPU generation only; 'unfitted' is the model with "
        "`Calibration()`'s generic values. A generation with one source has nothing to hold "
        "out against.",
        "",
        "| generation | source | engine | rows | unfitted | fitted on the other sources |",
        "|---|---|---|---|---|---|",
    ]
    for generation, tagged in observations.items():
        sources = sorted({source for source, _, _ in tagged})
        for source in sources:
            test = [o for s, _, o in tagged if s == source]
            train = [o for s, _, o in tagged if s != source]
            engine = next(e for s, e, _ in tagged if s == source)
            held = f"{median_abs_pct_error(fit(train, Calibration()), test):.1%}" if train else "-"
            lines.append(
                f"| {generation} | {source} | {engine} | {len(test)} | "
                f"{median_abs_pct_error(Calibration(), test):.1%} | {held} |"
            )
    return "\n".join(lines) + "\n"


def fp8_report() -> str:
    """FP8's speedup over bf16 on the published pairs of runs that differ only in FP8: as
    the FP8 peak alone would give it, with the fitted `fp8_efficiency`, and with it fitted
    to the other pair only."""
    found = list(pairs())
    hopper = DEFAULT_CALIBRATION["hopper"]
    lines = [
        "",
        "## FP8 beside bf16 (published pairs of runs)",
        "",
        "Speedup of the FP8 run over its bf16 twin (same source, model, GPUs, batch and flags; "
        "`autotune/calibration/fp8_pairs.py`). 'peak only': FP8 GEMMs at the FP8 peak with "
        "bf16's efficiency (`fp8_efficiency` 1); 'fitted': Hopper's default "
        f"(`fp8_efficiency` {hopper.fp8_efficiency}, fitted to both pairs); 'other pair': "
        "fitted to the other pair alone. Both pairs are one source's (torchtitan, Llama 3 8B, "
        "FSDP, torchao Float8 linears), so holding one out tests little.",
        "",
        "| rows (bf16, FP8) | GPUs | published | peak only | fitted | other pair |",
        "|---|---|---|---|---|---|",
    ]
    for pair in found:
        others = [p for p in found if p is not pair]
        held = fit_fp8(others, hopper) if others else None
        cells = [
            f"{speedup(pair, cal):.2f}x"
            for cal in (dataclasses.replace(hopper, fp8_efficiency=1.0), hopper)
        ]
        lines.append(
            f"| {pair.rows[0]}, {pair.rows[1]} | {pair.bf16.config.dp} | "
            f"{pair.bf16.step_time_s / pair.fp8.step_time_s:.2f}x | {cells[0]} | {cells[1]} | "
            f"{f'{speedup(pair, held):.2f}x' if held else '-'} |"
        )
    return "\n".join(lines) + "\n"


def moe_cp_report() -> str:
    """The Megatron runs with expert or context parallelism (`published_moe_cp`), predicted
    with Megatron's default calibration, fitted to the dense runs of the same pages and to
    none of these, its MoE host time refitted without the run's release; beside them the
    generation's default, without Megatron's own overrides."""
    runs, skipped = [], dict[object, int]()
    for c in published_moe_cp.cases():
        if isinstance(c, MoeCpCase):
            runs.append(c)
        else:
            skipped[c] = skipped.get(c, 0) + 1
    by_release = published_moe_cp.held_out_calibrations(runs)
    rows = []
    for c in runs:
        generation_default = DEFAULT_CALIBRATION.get(c.cluster.device.generation, Calibration())
        before = compared(c, c.cluster, "megatron", generation_default)["error"]
        held_out = by_release[c.row_id]
        rows.append(
            compared(c, c.cluster, "megatron", held_out)
            | {
                "host_s_held_out": held_out.moe_expert_host_s,
                "in_sample_error": compared(
                    c,
                    c.cluster,
                    "megatron",
                    c.calibrated(
                        default_calibration(
                            c.cluster.device.generation, get_engine("megatron").traits
                        )
                    ),
                )["error"],
                "generation_default_error": before,
                "release": c.release,
                "gpu": c.cluster.device.name,
                "fp8": c.workload.fp8,
            }
        )
    frame = pd.DataFrame(rows)
    # Each layout's newest release on its page: the software users run today.
    same_layout = ["source", "model", "gpu", "fp8", "layout"]
    newest = frame.groupby(same_layout)["release"].transform("max")
    frame["newest"] = frame["release"] == newest
    frame["abs_error"] = frame["error"].abs()
    frame["abs_before"] = frame["generation_default_error"].abs()
    in_sample = frame["in_sample_error"].abs().median()
    megatron = get_engine("megatron").traits
    engine_cal = {g: default_calibration(g, megatron) for g, _ in megatron.calibration_overrides}
    lines = [
        "",
        "## Expert- and context-parallel runs (published_moe_cp_runs.csv)",
        "",
        "Megatron-Bridge's and NeMo's pages (`autotune/calibration/published_moe_cp.py`: MoE "
        "shapes from the models' configs, recipe defaults where the pages are silent), "
        "predicted with Megatron's default calibration ("
        + "; ".join(
            f"{g}: compute efficiency {c.compute_efficiency}, FP8 efficiency {c.fp8_efficiency}"
            for g, c in sorted(engine_cal.items())
        )
        + "), which is fitted to the pages' dense Megatron runs (below) and to none of these: "
        "they are held out. Besides the experts' overlap (below), only their host time "
        "(the least time a micro-batch spends issuing each local expert's share of an MoE layer, "
        f"{engine_cal['hopper'].moe_expert_host_s * 1e3:.2f} ms in Megatron's default) is "
        "fitted to these runs, as only they measure it: each row is predicted with it refitted to "
        "the other releases' runs (`host_s_held_out`; `in_sample_error`: with the default, "
        "fitted to all); the runs whose recipe replays the whole iteration from CUDA graphs "
        "(Qwen3-30B-A3B in MXFP8 on GB200, GB300 and B300 from 26.06 on, "
        "`published_moe_cp.RECIPES_OVERLAPPED`) have none. Megatron's expert-parallel "
        "overlap (`ep_comm_overlap`, on in those recipes and where M3 says so) saves "
        f"{Calibration().ep_overlap:.0%} of the shorter of a micro-batch's token exchanges and "
        "its partner's compute: fitted to M3's runs with and without it (row 295 against "
        "rows 296 and 297, which it predicts in sample). "
        "'before': the same rows with the GPU generation's default, "
        "fitted to other software's runs, which Megatron used until it had its own. A sweep "
        "is one source's runs of a release, model, GPU and precision.",
        "",
        f"{len(frame)} rows predicted; skipped: "
        + "; ".join(f"{why} ({n})" for why, n in sorted(skipped.items(), key=lambda i: -i[1]))
        + ".",
        "",
        "| source | rows | median abs error | median signed error | before: median abs error "
        "| rank corr of tokens/s/GPU within a release's table on one GPU (median) |",
        "|---|---|---|---|---|---|",
    ]

    def summary(label: str, part: pd.DataFrame, corr: str = "") -> str:
        return (
            f"| {label} | {len(part)} | {part['abs_error'].median():.1%} | "
            f"{part['error'].median():+.1%} | {part['abs_before'].median():.1%} | {corr} |"
        )

    # One release's table on one GPU: its runs of several models and layouts, ordered by
    # tokens/s/GPU (no sweep of one model and release has three layouts).
    for source, part in frame.groupby("source"):
        corrs = [
            spearman(list(g.published_tps), list(g.predicted_tps))
            for _, g in part.groupby(["release", "gpu"])
            if len(g) > 2 and g["layout"].nunique() > 1
        ]
        corr = f"{statistics.median(corrs):.2f} ({len(corrs)} tables)" if corrs else "-"
        lines.append(summary(str(source), part, corr))
    for kind, part in frame.groupby(frame["sweep"].str.contains("Qwen3|Mixtral")):
        lines.append(summary("MoE" if kind else "dense with CP", part))
    for on_h100, part in frame.groupby(frame["sweep"].str.contains("H100")):
        lines.append(summary("H100" if on_h100 else "Blackwell (B200, GB200, B300, GB300)", part))
    lines += [
        summary("newest release of each layout", frame[frame["newest"]]),
        summary("older releases", frame[~frame["newest"]]),
        summary("all", frame),
        "",
        f"With the host time fitted to every release (in sample), all rows: {in_sample:.1%}.",
        "",
        *held_out_ways(runs, by_release),
        "",
        "A layout's newest release is the latest software on its page that ran it (same "
        "source, model, GPU, precision and degrees); its older releases measured the same "
        "layout on software since made faster, which no model of the layout can see.",
        "",
        frame.drop(columns=["abs_error", "abs_before", "newest", "gpu", "fp8"]).to_markdown(
            index=False, floatfmt=".3g"
        ),
        "",
    ]
    return "\n".join(lines) + anchor_report()


def held_out_ways(runs: list[MoeCpCase], by_release: dict[int, Calibration]) -> list[str]:
    """The median error of every run with the experts' host time fitted without its group,
    for each way of grouping (`published_moe_cp.HELD_OUT_BY`; by release, `by_release`)."""
    lines = [
        "The host time held out other ways (each run predicted with it fitted to the runs "
        "outside its group):",
        "",
        "| held out by | groups | median abs error, all rows | host time fitted (ms per expert) |",
        "|---|---|---|---|",
    ]
    for by, group in published_moe_cp.HELD_OUT_BY.items():
        cals = by_release if by == "release" else published_moe_cp.held_out_calibrations(runs, by)
        errors = [abs(compared(c, c.cluster, "megatron", cals[c.row_id])["error"]) for c in runs]
        hosts = [cals[c.row_id].moe_expert_host_s for c in runs if not c.graphs_whole_step]
        lines.append(
            f"| {by} | {len({group(c) for c in runs})} | {statistics.median(errors):.1%} | "
            f"{min(hosts) * 1e3:.2f}-{max(hosts) * 1e3:.2f} |"
        )
    return lines


def anchor_report() -> str:
    """Megatron's dense runs, to which its default calibration is fitted: in-sample error."""
    frame = pd.DataFrame([compared(c, c.cluster, "megatron") for c in published_moe_cp.anchors()])
    frame["abs_error"] = frame["error"].abs()
    lines = [
        "",
        "## Megatron's dense runs (the fit of its default calibration)",
        "",
        "The same pages' dense runs with a whole model shape (`published_moe_cp.anchors`; "
        "Megatron-FSDP runs whose weights fit unsharded taken as the distributed optimizer), to "
        "which Megatron's compute efficiency is fitted per GPU generation "
        "(`published_moe_cp.fitted_engine_defaults`): in-sample error, not a validation.",
        "",
        "| GPU generation | rows | median abs error | median signed error |",
        "|---|---|---|---|",
    ]
    for on_h100, part in frame.groupby(frame["sweep"].str.contains("H100")):
        lines.append(
            f"| {'hopper' if on_h100 else 'blackwell'} | {len(part)} | "
            f"{part['abs_error'].median():.1%} | {part['error'].median():+.1%} |"
        )
    lines += ["", frame.drop(columns=["abs_error"]).to_markdown(index=False, floatfmt=".3g"), ""]
    return "\n".join(lines)


def speedup(pair: Fp8Pair, cal: Calibration) -> float:
    """The model's bf16 step over its FP8 step, with the source's bf16 efficiency."""
    source = source_calibration([pair], cal)
    steps = [
        estimate(o.workload, o.config, o.cluster, o.traits, source).step.total_s
        for o in (pair.bf16, pair.fp8)
    ]
    return steps[0] / steps[1]


if __name__ == "__main__":
    main()
