"""Step time of one config, broken down by where the time goes.

compute: model FLOPs of the worst pipeline stage (plus recomputation) over an achievable rate
that grows with GEMM size; tensor parallel: 4 all-reduces (or all-gather + reduce-scatter with
sequence parallelism) of b·s·h per layer and micro-batch, 2 more under full recomputation;
pipeline: the 1F1B bubble (p-1)/v micro-batch times and the activation point-to-point
transfers; data parallel: gradient all-reduce (ZeRO 1-2: reduce-scatter + parameter
all-gather; ZeRO 3: per-micro-batch parameter gathers too) in buckets, partly hidden behind
the backward pass; optimizer: one pass over the rank's states at memory bandwidth.
Formulas: shared research comm_cost_model.md §5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.engines import traits_of
from autotune.estimate import comm
from autotune.estimate.collectives import Op
from autotune.estimate.commfit import CollectiveFit
from autotune.estimate.memory import rank_parameters, recomputed_layers
from autotune.estimate.stages import head_forward_flops, layer_forward_flops, stage_split
from autotune.space import TrainConfig
from autotune.specs import Cluster, Workload
from autotune.specs.workload import BYTES_PER_ELEMENT


@dataclass(frozen=True)
class Calibration:
    """The model's free parameters; defaults per device generation, fitted by `calibrate`."""

    compute_efficiency: float = 0.62
    """Share of peak FLOP/s that large GEMMs reach."""
    gemm_half_size: float = 400.0
    """Hidden width per tensor-parallel rank (h/tp, a GEMM's narrow side) at which half that
    share is reached: narrow GEMMs and the elementwise work around them run far from peak."""
    tokens_half: float = 256.0
    """Tokens per micro-batch (a GEMM's long side) at which that share halves: a GPU needs a
    few hundred rows to fill its tensor cores, a CPU core's GEMM is near its best at a few
    dozen, so on a CPU the micro-batch size hardly moves compute efficiency."""
    bandwidth_scale: float = 1.0
    """Share of the collective model's bandwidth the fabric delivers."""
    overlap: float = 0.8
    """Share of the backward pass that data-parallel communication can hide behind."""
    collectives: tuple[CollectiveFit, ...] = ()
    """Collective times fitted to this cluster's commbench (`calibrate --commbench`); where
    one matches, it replaces the collective model and bandwidth_scale."""


# GPU defaults: what scripts/fit_costmodel.py fits to the published runs
# (calibration/published.py; tests/unit/test_costmodel_fit.py checks these are its output,
# scripts/validate_costmodel.py reports the error held out by source); the CPU default is a
# first guess for gloo hosts.
DEFAULT_CALIBRATION = {
    "ampere": Calibration(
        compute_efficiency=0.7, gemm_half_size=387.0, bandwidth_scale=1.25, overlap=1.0
    ),
    "hopper": Calibration(
        compute_efficiency=0.46, gemm_half_size=230.0, bandwidth_scale=1.07, overlap=0.8
    ),
    "cpu": Calibration(compute_efficiency=0.3, gemm_half_size=32.0, tokens_half=16.0, overlap=0.3),
}


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    recompute_s: float
    """Part of compute_s spent recomputing activations."""
    tp_comm_s: float
    pp_bubble_s: float
    pp_p2p_s: float
    cp_comm_s: float
    """Context-parallel key/value exchange not hidden behind attention."""
    dp_comm_s: float
    """All data-parallel communication of the step, hidden or not."""
    dp_exposed_s: float
    optimizer_s: float

    @property
    def exposed_comm_s(self) -> float:
        """Communication the step waits for: what NCCL settings could shorten."""
        return self.tp_comm_s + self.pp_p2p_s + self.cp_comm_s + self.dp_exposed_s

    @property
    def total_s(self) -> float:
        return (
            self.compute_s
            + self.tp_comm_s
            + self.pp_bubble_s
            + self.pp_p2p_s
            + self.cp_comm_s
            + self.dp_exposed_s
            + self.optimizer_s
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "compute_s": self.compute_s,
            "recompute_s": self.recompute_s,
            "tp_comm_s": self.tp_comm_s,
            "pp_bubble_s": self.pp_bubble_s,
            "pp_p2p_s": self.pp_p2p_s,
            "cp_comm_s": self.cp_comm_s,
            "dp_comm_s": self.dp_comm_s,
            "dp_exposed_s": self.dp_exposed_s,
            "optimizer_s": self.optimizer_s,
            "total_s": self.total_s,
        }

    def dominant(self) -> str:
        parts = self.as_dict()
        del parts["total_s"], parts["recompute_s"], parts["dp_comm_s"]
        return max(parts, key=parts.__getitem__).removesuffix("_s")


def achievable_flops(
    w: Workload, config: TrainConfig, cluster: Cluster, cal: Calibration
) -> float:
    width = w.hidden_size / config.tp
    tokens = config.mbs * w.seq_length / config.cp
    peak = cluster.device.peak_flops.get(w.precision) or max(cluster.device.peak_flops.values())
    return (
        peak
        * cal.compute_efficiency
        * width
        / (width + cal.gemm_half_size)
        * tokens
        / (tokens + cal.tokens_half)
    )


def step_time(
    w: Workload, config: TrainConfig, cluster: Cluster, engine: str, cal: Calibration | None = None
) -> StepTime:
    cal = cal or DEFAULT_CALIBRATION.get(cluster.device.generation, Calibration())
    c, domain = config, cluster.domain_size
    micro = c.grad_accum(w.global_batch_size)
    width = BYTES_PER_ELEMENT[w.precision]
    rate = achievable_flops(w, c, cluster, cal)
    split = stage_split(w, c, engine)

    tp_group = comm.place(c.tp, 1, domain)
    activation = c.mbs * w.seq_length // c.cp * w.hidden_size * width
    per_collective = comm.seconds(
        "all_reduce",
        activation,
        tp_group,
        cluster,
        c.nccl_algo,
        c.nccl_proto,
        cal.bandwidth_scale,
        cal.collectives,
    )
    # The pipeline moves at the pace of its slowest rank: its layers' compute and tensor-
    # parallel collectives, plus the output layer on the last rank.
    kinds = {(layers, r == c.pp - 1) for r, layers in enumerate(split.rank_layers)}
    paces = [_rank_pace(w, c, layers, last, rate, per_collective) for layers, last in kinds]
    per_micro_compute, recompute_fwd, per_micro_tp = max(paces, key=lambda p: p[0] + p[2])
    busiest = max(split.rank_layers)
    per_micro_cp = busiest * _context_parallel(w, c, cluster, cal, rate)
    # The bubble idles each rank for (p-1)/v micro-batches of the whole stage's work,
    # context-parallel exchange included.
    bubble = (c.pp - 1) / c.vpp * (per_micro_compute + per_micro_tp + per_micro_cp)
    pp_group = comm.place(c.pp, c.tp * c.cp * c.dp, domain)
    link = cluster.intra_link if pp_group.nodes == 1 else cluster.inter_link
    p2p_bytes = activation / (c.tp if c.tp > 1 else 1)
    p2p = (
        0.0
        if c.pp == 1
        else 2
        * micro
        * c.vpp
        * (link.latency_s + p2p_bytes / (link.bandwidth_bytes_per_s * cal.bandwidth_scale))
    )

    cp = micro * per_micro_cp
    dp_comm, dp_exposed = _data_parallel(
        w, c, cluster, engine, cal, micro, per_micro_compute, split.rank_layers
    )
    shards = c.dp * c.cp if c.zero >= 1 else 1
    psi = rank_parameters(w, c.tp, c.pp, split.rank_layers) / shards
    optimizer = psi * (width * 2 + 16 + 4) / cluster.device.memory_bandwidth_bytes_per_s

    return StepTime(
        compute_s=micro * per_micro_compute,
        recompute_s=micro * recompute_fwd / rate,
        tp_comm_s=micro * per_micro_tp,
        pp_bubble_s=bubble,
        pp_p2p_s=p2p,
        cp_comm_s=cp,
        dp_comm_s=dp_comm,
        dp_exposed_s=dp_exposed,
        optimizer_s=optimizer,
    )


def _rank_pace(
    w: Workload,
    c: TrainConfig,
    layers: int,
    last: bool,
    rate: float,
    per_collective: float,
) -> tuple[float, float, float]:
    """One micro-batch on a pipeline rank of `layers`: (compute seconds, of which the FLOPs
    of recomputation, tensor-parallel collective seconds)."""
    fwd = layers * layer_forward_flops(w, c.mbs) + (head_forward_flops(w, c.mbs) if last else 0)
    fwd /= c.tp * c.cp
    recompute_fwd = 0.0
    rebuilt = recomputed_layers(w, c, layers)
    if c.recompute == "full":
        recompute_fwd = rebuilt * layer_forward_flops(w, c.mbs) / (c.tp * c.cp)
    elif c.recompute == "selective":
        recompute_fwd = layers * 4 * c.mbs * w.seq_length**2 * w.hidden_size / (c.tp * c.cp)
    return (
        (3 * fwd + recompute_fwd) / rate,
        recompute_fwd,
        (4 * layers + 2 * rebuilt) * per_collective,
    )


def _context_parallel(
    w: Workload, c: TrainConfig, cluster: Cluster, cal: Calibration, rate: float
) -> float:
    """Exposed seconds of one layer's context-parallel ring for one micro-batch: cp - 1 steps
    that pass a rank's keys and values on (forward), and keys, values and their gradients
    (backward), each hidden behind the attention block the step computes (Transformer
    Engine's p2p context parallelism)."""
    if c.cp == 1:
        return 0.0
    kv_heads = max(1, w.num_query_groups // c.tp)
    kv_bytes = 2 * c.mbs * (w.seq_length // c.cp) * kv_heads * w.head_dim
    kv_bytes *= BYTES_PER_ELEMENT[w.precision]
    group = comm.place(c.cp, c.tp, cluster.domain_size)
    link = cluster.intra_link if group.nodes == 1 else cluster.inter_link

    def send(nbytes: float) -> float:
        return link.latency_s + nbytes / (link.bandwidth_bytes_per_s * cal.bandwidth_scale)

    # Attention FLOPs of one ring step, forward: this rank's s/cp queries against another's
    # s/cp keys (QK^T and AV), half of them masked under causal load balancing.
    block = 2 * c.mbs * (w.seq_length / c.cp) ** 2 * w.hidden_size / c.tp
    forward = max(0.0, send(kv_bytes) - block / rate)
    backward = max(0.0, send(2 * kv_bytes) - 2 * block / rate)
    return (c.cp - 1) * (forward + backward)


def _data_parallel(
    w: Workload,
    c: TrainConfig,
    cluster: Cluster,
    engine: str,
    cal: Calibration,
    micro: int,
    per_micro_compute: float,
    rank_layers: tuple[int, ...],
) -> tuple[float, float]:
    """(all data-parallel communication, the part not hidden behind the backward pass).
    Context-parallel ranks hold the same weights: gradients are reduced, and optimizer
    states sharded, over dp·cp ranks (Megatron's data-parallel group with cp)."""
    replicas = c.dp * c.cp
    if replicas == 1:
        return 0.0, 0.0
    group = comm.place(replicas, c.tp, cluster.domain_size)
    t = traits_of(engine)
    width = BYTES_PER_ELEMENT[w.precision]
    if t.reduces_bf16_grads_in_fp32 and w.precision == "bf16":
        width = 4
    grad_bytes = rank_parameters(w, c.tp, c.pp, rank_layers) * width
    bucket = c.reduce_bucket * width if t.bucket_unit == "elements" else c.ddp_bucket_mb * 2**20
    n_buckets = max(1, math.ceil(grad_bytes / bucket))
    if t.one_bucket_without_overlap and not c.overlap_comm:
        n_buckets = 1

    def bucketed(op: Op, total: float) -> float:
        return n_buckets * comm.seconds(
            op,
            total / n_buckets / (replicas if op != "all_reduce" else 1),
            group,
            cluster,
            c.nccl_algo,
            c.nccl_proto,
            cal.bandwidth_scale,
            cal.collectives,
        )

    if c.zero == 0:
        grads = bucketed("all_reduce", grad_bytes)
        gathers = 0.0
    else:
        grads = bucketed("reduce_scatter", grad_bytes)
        gathers = bucketed("all_gather", grad_bytes)
    if c.zero >= 2 and micro > 1:
        grads *= micro  # ZeRO-2/3 and FSDP reduce every micro-batch
    if c.zero == 3:
        gathers = gathers * 2 * micro  # parameters gathered for forward and backward
    if t.overlap == "per_flag":
        work = cal.overlap * micro * per_micro_compute
        return grads + gathers, _exposed_per_flag(c, work, grads, gathers, n_buckets)
    total = grads + gathers
    overlaps = t.overlap == "always" or (c.overlap_comm and c.zero >= 1)
    if not overlaps:
        return total, total
    # Gradient reductions hide behind the backward passes; ZeRO-3 / FSDP prefetching hides
    # parameter gathers behind the forward passes too.
    hidden_share = 1.0 if c.zero == 3 else 2 / 3
    hideable = cal.overlap * hidden_share * micro * per_micro_compute
    last = total / n_buckets
    return total, max(last, total - hideable)


def _exposed_per_flag(
    c: TrainConfig, work: float, grads: float, gathers: float, n_buckets: int
) -> float:
    """Gradient reduction hidden behind the backward passes only with `overlap_comm` (its
    last bucket stays exposed), and the distributed optimizer's parameter all-gather behind
    the next forward passes only with `overlap_param_gather` (Megatron-LM's two flags)."""
    exposed_grads = max(grads / n_buckets, grads - work * 2 / 3) if c.overlap_comm else grads
    exposed_gathers = max(0.0, gathers - work / 3) if c.overlap_param_gather else gathers
    return exposed_grads + exposed_gathers
