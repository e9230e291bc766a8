"""Predict every published training run with a complete configuration and compare.

Reads ../shared/data/published_runs_public.csv (or --data), converts each source's figure to
one measure (step time in seconds, from the stated step time, from tokens/s, or from TFLOP/s
with the source's own FLOP formula), predicts it with autotune's step-time model, and writes
results/bench/costmodel_validation.md: per row predicted vs published, median absolute
percentage error per source and overall, and Spearman rank correlation within each sweep.

    .venv/bin/python scripts/validate_costmodel.py
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from autotune.estimate.calibrate import Observation, fit, median_abs_pct_error
from autotune.estimate.steptime import Calibration, step_time
from autotune.space import TrainConfig
from autotune.specs import Workload, load_cluster

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "published_runs_public.csv"
ENGINES = {"S1": "megatron", "S2": "megatron", "S4": "megatron", "S8": "torch", "S15": "deepspeed"}


@dataclass(frozen=True)
class Case:
    row_id: int
    source: str
    sweep: str
    workload: Workload
    cluster_name: str
    config: TrainConfig
    engine: str
    published_step_s: float
    measure: str


def eq3_flops(r: pd.Series) -> float:
    """Megatron eq. (3), hardware FLOPs per iteration (counts the recompute forward)."""
    b, s, layers, h, v = r.global_batch_seqs, r.seq_len, r.layers, r.hidden, r.vocab
    return 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


def published_step(r: pd.Series) -> tuple[float, str] | None:
    tokens = r.global_batch_seqs * r.seq_len
    if not math.isnan(r.step_time_s):
        return r.step_time_s, "step time"
    if not math.isnan(r.tokens_per_s_per_gpu):
        return tokens / (r.tokens_per_s_per_gpu * r.num_gpus), "tokens/s"
    if not math.isnan(r.tflops_per_gpu) and "eq.(3)" in str(r.flop_formula) + str(r.tflops_kind):
        return eq3_flops(r) / (r.tflops_per_gpu * 1e12 * r.num_gpus), "TFLOP/s (eq. 3)"
    return None


def skip_reason(r: pd.Series) -> str | None:
    if "V100" in r.gpu:
        return "V100: no device preset"
    if "offload" in str(r.dp_sharding).lower():
        return "CPU offload is not modelled"
    needed = (
        "layers",
        "hidden",
        "heads",
        "seq_len",
        "tp",
        "pp",
        "micro_batch",
        "global_batch_seqs",
        "num_gpus",
        "vocab",
    )
    missing = [k for k in needed if pd.isna(r[k])]
    if missing:
        return f"incomplete: no {', '.join(missing)}"
    return None


def case(r: pd.Series) -> Case | str:
    reason = skip_reason(r)
    if reason:
        return reason
    measured = published_step(r)
    if measured is None:
        return "no convertible measurement"
    tp, pp = int(r.tp), int(r.pp)
    dp = int(r.num_gpus) // (tp * pp)
    recompute = str(r.act_recompute).lower()
    mode = (
        "selective"
        if "selective" in recompute
        else "full"
        if (recompute.startswith(("full", "yes")))
        else "none"
    )
    sharding = str(r.dp_sharding).lower()
    zero = (
        3
        if ("zero-3" in sharding or "full_shard" in sharding)
        else 1
        if ("distributed optimizer" in sharding)
        else 0
    )
    swiglu = "llama" in str(r.model).lower()
    workload = Workload(
        name=str(r.model),
        num_layers=int(r.layers),
        hidden_size=int(r.hidden),
        num_attention_heads=int(r.heads),
        num_query_groups=int(r.kv_heads if not pd.isna(r.kv_heads) else r.heads),
        ffn_hidden_size=int(r.ffn_hidden),
        vocab_size=int(r.vocab),
        seq_length=int(r.seq_len),
        global_batch_size=int(r.global_batch_seqs),
        precision="fp16" if str(r.precision).endswith("fp16") else "bf16",
        swiglu=swiglu,
    )
    per_node = int(r.gpus_per_node) if not pd.isna(r.gpus_per_node) else 8
    kind = "dgx-h100" if "H100" in r.gpu else "dgx-a100"
    nodes = max(1, int(r.num_gpus) // per_node)
    mbs = int(r.micro_batch)
    if ENGINES[r.source_id] == "torch":  # FSDP frameworks state the per-GPU local batch
        mbs = min(mbs, int(r.global_batch_seqs) // dp)
    config = TrainConfig(
        tp=tp,
        pp=pp,
        vpp=int(r.vpp) if not pd.isna(r.vpp) else 1,
        dp=dp,
        zero=zero,
        mbs=mbs,
        recompute=mode,
        sp=str(r.seq_parallel).lower().startswith("yes"),
        # Megatron-LM's published runs overlap gradient reduction and parameter gathers.
        overlap_comm=ENGINES[r.source_id] == "megatron",
        overlap_param_gather=ENGINES[r.source_id] == "megatron" and zero == 1,
    )
    sweep = (
        f"{r.source_id} {r.gpu.split()[0]} {r.model}"
        if r.source_id == "S8"
        else (f"{r.source_id} {r.gpu.split()[0]}")
    )
    return Case(
        int(r.row_id),
        r.source_id,
        sweep,
        workload,
        f"{kind}:{nodes}",
        config,
        ENGINES[r.source_id],
        measured[0],
        measured[1],
    )


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = pd.Series(a).rank(), pd.Series(b).rank()
    return float(ra.corr(rb)) if len(a) > 2 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/costmodel_validation.md")
    args = parser.parse_args()
    data = pd.read_csv(args.data)
    rows, skipped = [], {}
    observations: dict[str, list[Observation]] = {}
    for _, r in data.iterrows():
        c = case(r)
        if isinstance(c, str):
            skipped[c] = skipped.get(c, 0) + 1
            continue
        cluster = load_cluster(c.cluster_name)
        observations.setdefault(cluster.device.generation, []).append(
            Observation(c.workload, cluster, c.config, c.engine, c.published_step_s)
        )
        pred = step_time(c.workload, c.config, load_cluster(c.cluster_name), c.engine)
        gpus = c.config.tp * c.config.pp * c.config.dp
        rows.append(
            {
                "row": c.row_id,
                "source": c.source,
                "sweep": c.sweep,
                "model": c.workload.name,
                "gpus": c.config.tp * c.config.pp * c.config.dp,
                "layout": c.config.label(),
                "measure": c.measure,
                "published_s": c.published_step_s,
                "predicted_s": pred.total_s,
                "error": pred.total_s / c.published_step_s - 1,
                "published_tps": c.workload.tokens_per_step / c.published_step_s / gpus,
                "predicted_tps": c.workload.tokens_per_step / pred.total_s / gpus,
                "dominant": pred.dominant(),
            }
        )
    frame = pd.DataFrame(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(frame, skipped, len(data)) + held_out(observations))
    text = args.out.read_text()
    print(text.split("## Every row")[0] + "## Held-out" + text.split("## Held-out")[1])


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


def held_out(observations: dict[str, list[Observation]]) -> str:
    """Two-fold cross-validation of the fit: fit on even rows, test on odd, and back."""
    lines = [
        "## Held-out error of the calibration",
        "",
        "The GPU defaults are fitted to these rows (in-sample above). Fitting on one half "
        "of each generation's rows and predicting the other half (both ways) shows how "
        "the fit generalises; 'unfitted' is the model with `Calibration()`'s generic "
        "values.",
        "",
        "| generation | rows | unfitted | fitted, held out |",
        "|---|---|---|---|",
    ]
    for generation, data in observations.items():
        halves = (data[::2], data[1::2])
        errors = [
            median_abs_pct_error(fit(train, Calibration()), test)
            for train, test in (halves, halves[::-1])
        ]
        lines.append(
            f"| {generation} | {len(data)} | "
            f"{median_abs_pct_error(Calibration(), data):.1%} | "
            f"{statistics.mean(errors):.1%} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
