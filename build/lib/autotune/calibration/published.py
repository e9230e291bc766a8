"""Published training runs (290 rows from papers and repositories, a copy of the project's
shared/data/published_runs_public.csv, whose README gives each source) read as observations
of the step-time model, and the GPU defaults fitted to them.

`DEFAULT_CALIBRATION` in estimate/calibration.py holds what `fitted_defaults()` gives, rounded
(`rounded`): scripts/fit_costmodel.py prints it and tests/calibration/test_costmodel_fit.py checks
it, so a change to the model that moves the fit shows up there.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from autotune.calibration.fp8_pairs import fitted_fp8_efficiency
from autotune.engines import get_engine
from autotune.estimate.calibrate import Observation, fit, rounded
from autotune.estimate.calibration import Calibration
from autotune.space import TrainConfig
from autotune.space.config import Recompute
from autotune.space.pipeline import split_layers
from autotune.specs import Workload, load_cluster

DATA = Path(__file__).resolve().parent / "data" / "published_runs_public.csv"
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
    """The row as a case to predict, or why it is left out."""
    reason = skip_reason(r)
    if reason:
        return reason
    measured = published_step(r)
    if measured is None:
        return "no convertible measurement"
    workload = _workload(r)
    config = _config(r)
    engine = ENGINES[r.source_id]
    style = get_engine(engine).traits.pipeline_split
    if split_layers(workload.num_layers, config.pp, config.vpp, style) is None:
        return f"{engine} cannot place its layers on pp·vpp stages"
    per_node = int(r.gpus_per_node) if not pd.isna(r.gpus_per_node) else 8
    kind = "dgx-h100" if "H100" in r.gpu else "dgx-a100"
    nodes = max(1, int(r.num_gpus) // per_node)
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
        engine,
        measured[0],
        measured[1],
    )


def _workload(r: pd.Series) -> Workload:
    """The model and batch the row trained."""
    return Workload(
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
        swiglu="llama" in str(r.model).lower(),
    )


def _config(r: pd.Series) -> TrainConfig:
    """The row's layout and settings as a config."""
    tp, pp = int(r.tp), int(r.pp)
    dp = int(r.num_gpus) // (tp * pp)
    zero = _zero(r)
    mbs = int(r.micro_batch)
    if ENGINES[r.source_id] == "torch":  # FSDP frameworks state the per-GPU local batch
        mbs = min(mbs, int(r.global_batch_seqs) // dp)
    return TrainConfig(
        tp=tp,
        pp=pp,
        vpp=int(r.vpp) if not pd.isna(r.vpp) else 1,
        dp=dp,
        zero=zero,
        mbs=mbs,
        recompute=_recompute(r),
        sp=str(r.seq_parallel).lower().startswith("yes"),
        # Megatron-LM's published runs overlap gradient reduction and parameter gathers.
        overlap_comm=ENGINES[r.source_id] == "megatron",
        overlap_param_gather=ENGINES[r.source_id] == "megatron" and zero == 1,
    )


def _recompute(r: pd.Series) -> Recompute:
    """The row's activation recomputation, in the config's terms."""
    recompute = str(r.act_recompute).lower()
    if "selective" in recompute:
        return "selective"
    return "full" if recompute.startswith(("full", "yes")) else "none"


def _zero(r: pd.Series) -> int:
    """The row's data-parallel sharding as a ZeRO stage (Megatron: 1 = distributed
    optimizer)."""
    sharding = str(r.dp_sharding).lower()
    if "zero-3" in sharding or "full_shard" in sharding:
        return 3
    return 1 if "distributed optimizer" in sharding else 0


def cases(path: Path = DATA) -> Iterator[Case | str]:
    """Each row as a case to predict, or why it is left out."""
    for _, row in pd.read_csv(path).iterrows():
        yield case(row)


def observations(path: Path = DATA) -> dict[str, list[Observation]]:
    """The usable rows per device generation, with the source's step time."""
    found: dict[str, list[Observation]] = {}
    for c in cases(path):
        if isinstance(c, Case):
            cluster = load_cluster(c.cluster_name)
            found.setdefault(cluster.device.generation, []).append(
                Observation(
                    c.workload, cluster, c.config, get_engine(c.engine).traits, c.published_step_s
                )
            )
    return found


def fitted_defaults(path: Path = DATA) -> dict[str, Calibration]:
    """Each GPU generation's calibration fitted to all its published rows, from the generic
    `Calibration()`; Hopper's FP8 efficiency fitted to the published bf16/FP8 pairs
    (`fp8_pairs`, all on H100) from there."""
    fitted = {g: rounded(fit(data, Calibration())) for g, data in observations(path).items()}
    if "hopper" in fitted:
        hopper = fitted["hopper"]
        fitted["hopper"] = replace(hopper, fp8_efficiency=fitted_fp8_efficiency(hopper))
    return fitted
