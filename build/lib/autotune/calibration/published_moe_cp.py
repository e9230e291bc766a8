"""Published Megatron runs with expert or context parallelism (the copy of
shared/data/published_moe_cp_runs.csv in data/), read as cases for the step-time model.

The table gives each run's degrees, batch, precision and figure but no MoE shapes, so those
come from the models' published configs (`SHAPES`; DeepSeek's latent attention, GPT-OSS's
sinks and the Nemotron hybrids are not shapes the model has). Settings the performance pages
leave to Megatron-Bridge's recipe files are its defaults: the distributed optimizer with both
overlaps, sequence parallelism and tensor-parallel overlap (`CommOverlapConfig(
tp_comm_overlap=True)`) with tp > 1, experts' tensor parallelism 1, no recomputation unless
stated. Megatron-Bridge's MoE runs route tokens "force-balanced", as the model
assumes; real routing is slower (the data's README: 8-20%). A sweep is one release's runs of
a model, GPU and precision, so that a comparison of its layouts is not one of releases.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from scipy.optimize import minimize_scalar

from autotune.engines import get_engine
from autotune.estimate.calibrate import BOUNDS, Observation, fit, log_errors, rounded
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration, default_calibration
from autotune.estimate.predict import estimate
from autotune.space import TrainConfig, first_violation
from autotune.specs import Cluster, Workload, load_cluster, load_workload
from autotune.specs.workload import Fp8Recipe

DATA = Path(__file__).resolve().parent / "data" / "published_moe_cp_runs.csv"
ROLES = ("moe_ep", "cp", "moe_and_cp")
ANCHOR = "anchor_dense"
"""Dense runs of the same pages: what Megatron's own calibration is fitted to
(`fitted_engine_defaults`), so that its expert- and context-parallel runs stay held out."""
ENGINE_FIT = ("compute_efficiency",)
MEGATRON_SOURCES = ("M1", "M3", "M6", "M7", "M8")
"""Megatron-Bridge and NeMo's pages; M2 (Automodel, FSDP2) and M9 (torchtitan) run other
engines."""
SHAPES: dict[str, Workload] = {
    "Qwen3-30B-A3B": load_workload("qwen3-30b-a3b"),
    "Mixtral-8x7B": load_workload("mixtral-8x7b"),
    # Qwen3-235B-A22B's config.json: 94 layers, 64 heads of 128 over a 4,096 hidden size,
    # 4 KV heads, 128 experts of width 1,536, top-8.
    "Qwen3-235B-A22B": dataclasses.replace(
        load_workload("qwen3-30b-a3b"),
        name="Qwen3-235B-A22B",
        num_layers=94,
        hidden_size=4096,
        num_attention_heads=64,
        ffn_hidden_size=12288,
        moe_ffn_hidden_size=1536,
    ),
}
"""MoE models by the table's name, as their Hugging Face configs give them."""
RECIPES_OVERLAPPED = {("Qwen3-30B-A3B", gpu, "mxfp8") for gpu in ("GB200", "GB300", "B300")}
"""(model, GPU, FP8 recipe) whose Megatron-Bridge performance recipe from v0.5.0 (NeMo
container 26.06) on overlaps the experts' all-to-alls and captures the whole iteration in
CUDA graphs (scripts/performance/configs/qwen/qwen3_workload_base_configs.py at v0.5.0:
`moe_a2a_overlap=True, cuda_graph_impl="full_iteration"` for FP8_MX, commit 55443cbfb; the
same at 26.08 through `_enable_hybridep_full_iteration_mxfp8`). The performance pages do not
say; earlier releases ran partial graphs (router and dispatch preprocessing) without it.
megatron-core 0.16.1, which this project installs, refuses graphs other than Transformer
Engine's with the overlap: the recipes run a later megatron-core, read from Megatron-Bridge,
not run here."""
FIRST_OVERLAPPED_RELEASE = (26, 6)
CLUSTERS = {
    "H100": "dgx-h100",
    "B200": "dgx-b200",
    "GB200": "gb200-nvl72",
    "B300": "dgx-b300",
    "GB300": "gb300-nvl72",
}


@dataclass(frozen=True)
class MoeCpCase:
    row_id: int
    source: str
    sweep: str
    """Runs of one source, release, model, GPU and precision (the report's sweep column)."""
    workload: Workload
    cluster: Cluster
    config: TrainConfig
    published_step_s: float
    release: str
    """The software the page measured (a NeMo container, a Megatron-Bridge commit): one
    layout's runs differ by up to 1.7x across releases."""
    graphs_whole_step: bool = False
    """The recipe captures the whole iteration in CUDA graphs (`cuda_graph_impl=
    "full_iteration"`, `RECIPES_OVERLAPPED`): the host issues no kernels per expert."""

    def calibrated(self, cal: Calibration) -> Calibration:
        """`cal` for this run's software: a step replayed from CUDA graphs has no host time."""
        return dataclasses.replace(cal, moe_expert_host_s=0.0) if self.graphs_whole_step else cal


def cases(path: Path = DATA, roles: tuple[str, ...] = ROLES) -> Iterator[MoeCpCase | str]:
    """Each expert- or context-parallel row (or each row of `roles`) as a case, or why it is
    left out."""
    rows = pd.read_csv(path)
    for _, row in rows[rows.row_role.isin(roles)].iterrows():
        yield _case(row)


def anchors(path: Path = DATA) -> list[MoeCpCase]:
    """Megatron's dense runs with a whole shape. A Megatron-FSDP run is taken as the
    distributed optimizer where its parameter gathers could overlap the compute, but not
    where the weights and gradients it shards would not fit unsharded (a 405B model over
    tp 2): its step time is another layout's."""
    return [c for c in cases(path, (ANCHOR,)) if isinstance(c, MoeCpCase) and _states_fit(c)]


def _states_fit(c: MoeCpCase) -> bool:
    memory = estimate(c.workload, c.config, c.cluster, get_engine("megatron").traits).memory
    return memory.weights + memory.gradients <= c.cluster.device.memory_bytes


def fitted_engine_defaults(path: Path = DATA) -> dict[tuple[str, str], Calibration]:
    """Megatron's compute efficiency per GPU generation, fitted to its dense runs from the
    generation's default, and its experts' host time, fitted to the expert-parallel runs
    (`fitted_moe_host_time`): what Megatron's `EngineTraits.calibration_overrides` state."""
    by_generation: dict[str, list[Observation]] = {}
    for c in anchors(path):
        by_generation.setdefault(c.cluster.device.generation, []).append(_observed(c))
    compute = {
        generation: rounded(
            fit(data, DEFAULT_CALIBRATION.get(generation, Calibration()), free=ENGINE_FIT)
        )
        for generation, data in sorted(by_generation.items())
    }
    runs = [c for c in cases(path) if isinstance(c, MoeCpCase)]
    host = fitted_moe_host_time(runs, compute)
    return {
        ("megatron", generation): dataclasses.replace(cal, moe_expert_host_s=host)
        for generation, cal in compute.items()
    }


def fitted_moe_host_time(runs: Sequence[MoeCpCase], start: dict[str, Calibration]) -> float:
    """`Calibration.moe_expert_host_s` of least squared log error over the expert-parallel
    runs among `runs`, each predicted with its generation's calibration in `start`: one
    host time per expert for every GPU, as the host's Python issues the same kernels to each.

    Only these runs measure it (dense layers keep their GPUs busier than their host; a step
    replayed from CUDA graphs has none), so the validation refits it without each release it
    predicts (`held_out_calibrations`)."""
    measured = [c for c in runs if c.workload.is_moe and not c.graphs_whole_step]
    data = [(start[c.cluster.device.generation], _observed(c)) for c in measured]

    def loss(host: float) -> float:
        return sum(
            error**2
            for cal, o in data
            for error in log_errors(dataclasses.replace(cal, moe_expert_host_s=host), [o])
        )

    bounds = BOUNDS["moe_expert_host_s"]
    best = minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": 1e-8})
    return round(float(best.x), 5)


def overlap_pairs(runs: Sequence[MoeCpCase]) -> list[tuple[MoeCpCase, MoeCpCase]]:
    """Runs of one sweep that differ only in the expert-parallel overlap: (without, with)."""
    without = {
        (c.sweep, dataclasses.replace(c.config, ep_comm_overlap=True)): c
        for c in runs
        if not c.config.ep_comm_overlap
    }
    return [
        (without[(c.sweep, c.config)], c)
        for c in runs
        if c.config.ep_comm_overlap and (c.sweep, c.config) in without
    ]


def fitted_ep_overlap(path: Path = DATA) -> float:
    """`Calibration.ep_overlap` that makes the model's overlapped runs as much faster than
    their pairs without the overlap as published (`overlap_pairs`): the compute efficiency
    is first fitted to the runs without it, so the share is the overlap's gain, not the
    model's error on the layout; the fit starts from a full overlap, so its result does not
    depend on the code's share."""
    runs = [c for c in cases(path) if isinstance(c, MoeCpCase)]
    found = overlap_pairs(runs)
    start = found[0][0].calibrated(
        default_calibration(found[0][0].cluster.device.generation, get_engine("megatron").traits)
    )
    alone = fit([_observed(off) for off, _ in found], start, free=("compute_efficiency",))
    full = dataclasses.replace(alone, ep_overlap=1.0)
    return round(fit([_observed(on) for _, on in found], full, free=("ep_overlap",)).ep_overlap, 2)


HELD_OUT_BY: dict[str, Callable[[MoeCpCase], object]] = {
    "release": lambda c: c.release,
    "layout (model, GPU, degrees)": lambda c: (c.workload.name, c.cluster.device.name, c.config),
    "GPU": lambda c: c.cluster.device.name,
    "source": lambda c: c.source,
    "model": lambda c: c.workload.name,
}
"""Ways to hold runs out of the host-time fit, each stricter about what the fit may have
seen: a release's software sets its host time, but neighbouring releases share layouts; a
model held out tests the time per expert on another expert count."""


def held_out_calibrations(
    runs: Sequence[MoeCpCase], by: str = "release"
) -> dict[int, Calibration]:
    """Per run (by row), Megatron's default calibration with the experts' host time fitted
    to the runs outside its group (`HELD_OUT_BY[by]`)."""
    megatron = get_engine("megatron").traits
    start = {g: default_calibration(g, megatron) for g, _ in megatron.calibration_overrides}
    group = HELD_OUT_BY[by]
    host = {
        key: fitted_moe_host_time([c for c in runs if group(c) != key], start)
        for key in {group(c) for c in runs}
    }
    return {
        c.row_id: c.calibrated(
            dataclasses.replace(
                default_calibration(c.cluster.device.generation, megatron),
                moe_expert_host_s=host[group(c)],
            )
        )
        for c in runs
    }


def _observed(c: MoeCpCase) -> Observation:
    megatron = get_engine("megatron").traits
    return Observation(c.workload, c.cluster, c.config, megatron, c.published_step_s)


def _case(r: pd.Series) -> MoeCpCase | str:
    if r.source_id not in MEGATRON_SOURCES:
        return f"{r.source_id}: not a Megatron run"
    if not pd.isna(r["flags"]) and "swapped" in str(r["flags"]).lower():
        return "batch flagged as misprinted by the data"
    gpu = str(r.gpu).split()[0]
    if gpu not in CLUSTERS:
        return f"{gpu}: no device preset"
    missing = [k for k in ("tp", "pp", "mbs", "gbs", "seq_len") if pd.isna(r[k])]
    if pd.isna(r.tokens_per_s_per_gpu) and pd.isna(r.step_time_s):
        missing.append("tokens/s or step time")
    if missing:
        return f"incomplete: no {', '.join(missing)}"
    gpus = int(r.num_gpus)
    cluster = _cluster(gpu, gpus)
    workload = _workload(r, cluster.device.generation)
    if isinstance(workload, str):
        return workload
    graphed = _recipe_overlaps(r, gpu, workload)
    tp, pp, cp = int(r.tp), int(r.pp), _degree(r.cp)
    if gpus % (tp * pp * cp):
        return "tp·pp·cp does not divide the GPUs (as printed)"
    config = TrainConfig(
        tp=tp,
        pp=pp,
        vpp=_degree(r.vpp),
        cp=cp,
        dp=gpus // (tp * pp * cp),
        ep=_degree(r.ep),
        etp=_degree(r.etp),
        sp=tp > 1,
        tp_comm_overlap=tp > 1,
        ep_comm_overlap=_overlaps_ep_comm(r) or graphed,
        zero=1,
        mbs=int(r.mbs),
        recompute="full" if str(r.recompute).lower().startswith("full") else "none",
        overlap_comm=True,
        overlap_param_gather=True,
    )
    broken = first_violation(config, workload, cluster, get_engine("megatron").rules)
    if broken is not None:
        return f"breaks {broken.name}"
    step = (
        float(r.step_time_s)
        if not pd.isna(r.step_time_s)
        else workload.tokens_per_step / (float(r.tokens_per_s_per_gpu) * gpus)
    )
    sweep = f"{r.source_id} {r.software_version} {r.model} {gpu} {workload.fp8}"
    return MoeCpCase(
        int(r.row_id), str(r.source_id), sweep, workload, cluster, config, step,
        str(r.software_version), graphs_whole_step=graphed,
    )  # fmt: skip


def _overlaps_ep_comm(r: pd.Series) -> bool:
    """The run names Megatron's expert-parallel overlap as on (M3's notes: its flag, or
    "EP overlap on"); the pages that say nothing ran without it, as the recipes' default."""
    flags = "" if pd.isna(r.other_flags) else str(r.other_flags).lower()
    return "overlap_moe_expert_parallel_comm=true" in flags or "ep overlap on" in flags


def _recipe_overlaps(r: pd.Series, gpu: str, workload: Workload) -> bool:
    """The run's release of Megatron-Bridge's recipe overlaps the experts' all-to-alls in
    a whole-iteration CUDA graph (`RECIPES_OVERLAPPED`)."""
    container = re.match(r"NeMo container (\d+)\.(\d+)", str(r.software_version))
    return (
        container is not None
        and (int(container[1]), int(container[2])) >= FIRST_OVERLAPPED_RELEASE
        and (str(r.model), gpu, workload.fp8) in RECIPES_OVERLAPPED
    )


def _degree(value: object) -> int:
    return 1 if pd.isna(value) else int(value)  # type: ignore[call-overload]


def _workload(r: pd.Series, generation: str) -> Workload | str:
    fp8 = _fp8(str(r.precision), generation)
    if fp8 is None:
        return f"precision {r.precision}: not modelled"
    seq, batch = int(r.seq_len), int(r.gbs)
    if r.row_role in ("cp", ANCHOR):
        if any(pd.isna(r[k]) for k in ("layers", "hidden", "heads", "ffn_hidden", "vocab")):
            return "incomplete: no model shape"
        return Workload(
            name=str(r.model),
            num_layers=int(r.layers),
            hidden_size=int(r.hidden),
            num_attention_heads=int(r.heads),
            num_query_groups=_degree(r.kv_heads) if not pd.isna(r.kv_heads) else int(r.heads),
            ffn_hidden_size=int(r.ffn_hidden),
            vocab_size=int(r.vocab),
            swiglu=True,
            seq_length=seq,
            global_batch_size=batch,
            fp8=fp8,
        )
    shape = SHAPES.get(str(r.model))
    if shape is None:
        return f"{r.model}: no shape (latent attention, sinks or hybrid layers)"
    return dataclasses.replace(shape, seq_length=seq, global_batch_size=batch, fp8=fp8)


def _fp8(precision: str, generation: str) -> Fp8Recipe | None:
    """Transformer Engine's recipe the page's precision names: MXFP8 (Blackwell), current
    (tensorwise) scaling for FP8-CS and for a plain FP8 (the step time is the same for
    either recipe in the model)."""
    if "variant" in precision.lower() or "blockwise" in precision.lower():
        return None  # FP8 of an unstated or block-wise recipe
    word = precision.split()[0].upper()
    if word == "BF16":
        return "none"
    if word in ("MXFP8", "FP8-MX"):
        return "mxfp8" if generation == "blackwell" else None
    if word in ("FP8", "FP8-CS"):
        return "tensorwise"
    return None


def _cluster(gpu: str, gpus: int) -> Cluster:
    """The preset cluster of these GPUs: nodes of 8, or trays of 4 in NVL72 racks."""
    base = load_cluster(f"{CLUSTERS[gpu]}:1")
    return dataclasses.replace(base, name=f"{gpu} x {gpus}", nodes=gpus // base.devices_per_node)
