"""Step time of each config of a table, broken down by where the time goes.

compute: model FLOPs of the worst pipeline stage (plus recomputation) over an achievable rate
that grows with GEMM size (a routed expert's GEMMs at an expert's width); tensor parallel: 4
all-reduces (or all-gather + reduce-scatter with sequence parallelism) of b·s·h per layer and
micro-batch, 2 more under full recomputation;
pipeline: the 1F1B bubble (p-1)/v micro-batch times and the activation point-to-point
transfers; data parallel: gradient all-reduce (ZeRO 1-2: reduce-scatter + parameter
all-gather; ZeRO 3: per-micro-batch parameter gathers too) in buckets, partly hidden behind
the backward pass; expert parallel: each MoE layer's tokens sent to their experts and back,
all-to-all over the expert-parallel group (gathered over expert tensor parallel ranks),
twice forward and twice backward, not overlapped unless Megatron runs one micro-batch's
forward beside another's backward (`ep_comm_overlap`); expert gradients reduced over the expert
data-parallel ranks; host: a rank's micro-batch takes at least the time its host needs to
issue its MoE layers; optimizer: one pass over the rank's states at memory bandwidth.
Formulas: shared research comm_cost_model.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

import numpy as np

from autotune.estimate import comm
from autotune.estimate.activations import recomputed_layers
from autotune.estimate.calibration import Calibration
from autotune.estimate.collectives import Op
from autotune.estimate.commfit import CollectiveFit
from autotune.estimate.model_states import (
    HeldParameters,
    expert_data_parallel,
    most_parameters,
    state_shards,
)
from autotune.estimate.stages import (
    Stages,
    head_forward_flops,
    layer_forward_flops,
    layer_linear_forward_flops,
)
from autotune.estimate.traits import EngineTraits
from autotune.space.table import ConfigTable, NcclRuns
from autotune.specs import Cluster, Workload
from autotune.specs.workload import BYTES_PER_ELEMENT

Seconds = TypeVar("Seconds", float, np.ndarray)


@dataclass(frozen=True)
class StepTime(Generic[Seconds]):
    """Where a step's time goes: of one config (floats), or of each config of a table
    (arrays, `row` gives one)."""

    compute_s: Seconds
    recompute_s: Seconds
    """Part of compute_s spent recomputing activations."""
    tp_comm_s: Seconds
    pp_bubble_s: Seconds
    pp_p2p_s: Seconds
    cp_comm_s: Seconds
    """Context-parallel key/value exchange not hidden behind attention."""
    ep_comm_s: Seconds
    """Mixture-of-experts token dispatch and combine (expert parallel)."""
    dp_comm_s: Seconds
    """All data-parallel communication of the step, hidden or not."""
    dp_exposed_s: Seconds
    optimizer_s: Seconds
    host_wait_s: Seconds
    """GPUs idle while the host issues MoE layers' kernels (`Calibration.moe_expert_host_s`)."""
    offload_s: Seconds
    """DeepSpeed's offload: gradients down and parameters up over the host link, the CPU's
    optimizer step, parameter partitions fetched from the host (ZeRO 3); not overlapped."""

    @property
    def exposed_comm_s(self) -> Seconds:
        """Communication the step waits for: what NCCL settings could shorten."""
        return self.tp_comm_s + self.pp_p2p_s + self.cp_comm_s + self.ep_comm_s + self.dp_exposed_s

    @property
    def total_s(self) -> Seconds:
        return (
            self.compute_s
            + self.tp_comm_s
            + self.pp_bubble_s
            + self.pp_p2p_s
            + self.cp_comm_s
            + self.ep_comm_s
            + self.dp_exposed_s
            + self.optimizer_s
            + self.host_wait_s
            + self.offload_s
        )

    def as_dict(self) -> dict[str, Seconds]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "total_s": self.total_s}

    def row(self: StepTime[np.ndarray], i: int) -> StepTime[float]:
        return StepTime(**{f.name: float(getattr(self, f.name)[i]) for f in fields(self)})

    def dominant(self: StepTime[float]) -> str:
        parts = self.as_dict()
        del parts["total_s"], parts["recompute_s"], parts["dp_comm_s"]
        return max(parts, key=parts.__getitem__).removesuffix("_s")


def achievable_flops(
    w: Workload, c: ConfigTable, cluster: Cluster, cal: Calibration
) -> np.ndarray:
    return _rate(_peak(w, cluster), w.hidden_size / c.tp, c.mbs * w.seq_length / c.cp, cal)


def _peak(w: Workload, cluster: Cluster) -> float:
    peaks = cluster.device.peak_flops
    return peaks.get(w.precision) or max(v for k, v in peaks.items() if k != "fp8")


def _fp8_peak(w: Workload, cluster: Cluster) -> float | None:
    if w.fp8 == "none":
        return None
    if "fp8" not in cluster.device.peak_flops:
        raise ValueError(f"fp8 {w.fp8}: {cluster.device.name} has no FP8 peak")
    return cluster.device.peak_flops["fp8"]


def _rate(peak: float, width: np.ndarray, tokens: np.ndarray, cal: Calibration) -> np.ndarray:
    """FLOP/s a GEMM `width` wide (h/tp) over `tokens` rows reaches."""
    return (
        peak
        * cal.compute_efficiency
        * _width_share(width, cal)
        * tokens
        / (tokens + cal.tokens_half)
    )


def _width_share(width: np.ndarray, cal: Calibration) -> np.ndarray:
    """Of the rate large GEMMs reach, the share one whose narrow side is `width` reaches."""
    return width / (width + cal.gemm_half_size)


@dataclass(frozen=True)
class StepParts:
    """A table's step times before calibration: FLOPs, communication timings and what decides
    overlap, from which `time(cal)` is a few array operations per config (a search refits the
    model after every trial and predicts every candidate again)."""

    peak: float
    width: np.ndarray
    """h / tp: a GEMM's narrow side."""
    tokens: np.ndarray
    """Tokens per micro-batch on a rank: a GEMM's long side."""
    micro: np.ndarray
    flops: np.ndarray
    """Per kind of pipeline rank (rows) and config: one micro-batch's FLOPs, recomputation
    included (`recompute_flops`), and its tensor-parallel collectives (`tp_collectives`)."""
    recompute_flops: np.ndarray
    tp_collectives: np.ndarray
    linear_flops: np.ndarray
    """Per kind of pipeline rank and config: one micro-batch's FLOPs in linear layers' GEMMs
    (forward, backward, recomputed); less the routed experts', those behind which Transformer
    Engine's tensor-parallel overlap hides the collectives."""
    tp_comm_overlap: np.ndarray
    unpaired: np.ndarray
    """Megatron's expert-parallel overlap (0 without it): each micro-batch's token exchanges
    hide behind the compute of the micro-batch paired with it, but the schedule's warm-up
    forwards and cool-down backwards have no partner. Micro-batches' worth of a rank's
    passes that run without a partner:
    megatron-core's warm-up chunks on the first rank, 2(p-1) + (v-1)p + 1 of a micro-batch's
    v chunks (one without a pipeline: the first forward and the last backward), at most all."""
    moe_exchanges: np.ndarray
    """Per kind of pipeline rank and config: one micro-batch's MoE token exchanges (each a
    layer's forward dispatch and combine, `moe_exchange`)."""
    local_experts: np.ndarray
    """Routed experts on a rank (experts / ep), each of whose GEMMs the host issues."""
    moe: bool
    """A mixture of experts: its exchanges are counted (none otherwise)."""
    expert_flops: np.ndarray
    """Of `flops`, those in the routed experts' GEMMs, whose narrow side is an expert's width
    over etp (`expert_width`), not h/tp: narrow experts run further from peak;
    `expert_recompute_flops`, those of `recompute_flops`."""
    expert_recompute_flops: np.ndarray
    expert_width: np.ndarray
    fp8_flops: np.ndarray
    """Of `flops`, those in FP8 GEMMs, which run at `fp8_peak` (none without FP8);
    `fp8_recompute_flops`, those of `recompute_flops`."""
    fp8_recompute_flops: np.ndarray
    fp8_peak: float | None
    per_collective: comm.Timing
    moe_exchange: comm.Timing
    busiest: np.ndarray
    cp_ranks: np.ndarray
    context_parallel: bool
    """Some config splits the sequence: the ring is counted (none otherwise)."""
    cp_send: tuple[comm.Timing, comm.Timing]
    """One context-parallel ring step's send, forward (keys, values) and backward (and their
    gradients), and the attention FLOPs of a forward step that hide it (`cp_block`)."""
    cp_block: np.ndarray
    cp_hidden: bool
    """The ring's sends hide behind the attention blocks (Transformer Engine); else nothing
    hides them (`EngineTraits.cp_gathers_kv`)."""
    bubble_share: np.ndarray
    """(p-1)/v: micro-batches of a stage's work each rank idles for."""
    p2p: comm.Timing
    grads: comm.Timing
    gathers: comm.Timing
    n_buckets: np.ndarray
    overlap: str
    """The engine's overlap rule (`EngineTraits.overlap`)."""
    overlap_comm: np.ndarray
    overlap_param_gather: np.ndarray
    zero: np.ndarray
    alone: np.ndarray
    """No data-parallel peer: nothing to reduce."""
    optimizer: np.ndarray
    offload: np.ndarray

    def take(self, rows: np.ndarray) -> StepParts:
        """The parts of these configs, in this order: a search predicts only the candidates
        it may still propose."""
        n = len(self.micro)

        def taken(value: Any) -> Any:
            if isinstance(value, np.ndarray) and value.ndim and value.shape[-1] == n:
                return value[..., rows]  # per config, or per kind of rank and config
            if isinstance(value, comm.Timing):
                return comm.Timing(taken(value.fixed), taken(value.scaled))
            if isinstance(value, tuple):
                return tuple(taken(v) for v in value)
            return value  # the same for every config

        return StepParts(**{f.name: taken(getattr(self, f.name)) for f in fields(self)})

    def time(self, cal: Calibration) -> StepTime[np.ndarray]:
        scale, n = cal.bandwidth_scale, len(self.micro)
        rate = _rate(self.peak, self.width, self.tokens, cal)
        fp8_rate = (
            _rate(self.fp8_peak * cal.fp8_efficiency, self.width, self.tokens, cal)
            if self.fp8_peak is not None
            else None
        )

        # Routed experts' GEMMs (in FP8 with FP8, as linear layers) at their own width.
        expert_slowdown = _width_share(self.width, cal) / _width_share(self.expert_width, cal)
        linear_rate = rate if fp8_rate is None else fp8_rate  # linear layers' GEMMs

        def seconds(flops: np.ndarray, in_fp8: np.ndarray, experts: np.ndarray) -> np.ndarray:
            at_width = (
                flops / rate if fp8_rate is None else (flops - in_fp8) / rate + in_fp8 / fp8_rate
            )
            if not self.moe:
                return at_width
            return at_width + experts / linear_rate * (expert_slowdown - 1)

        # The pipeline moves at the pace of its slowest rank: its layers' compute and
        # tensor-parallel collectives, plus the output layer on the last rank.
        compute = seconds(self.flops, self.fp8_flops, self.expert_flops)
        tp = self.tp_collectives * self.per_collective.seconds(scale)
        # --tp-comm-overlap: each all-gather and reduce-scatter runs in chunks beside the
        # GEMM it feeds or follows (attention's, the dense or shared MLP's: routed experts
        # take no TP collective); what those GEMMs cannot cover stays exposed.
        beside = self.linear_flops - self.expert_flops
        gemms = beside / linear_rate
        tp = np.where(self.tp_comm_overlap, np.maximum(0.0, tp - gemms), tp)
        pace, ep, hidden, host = compute + tp, None, None, None
        if self.moe:  # a search refits often: dense tables skip what is zero for them
            exchanges = self.moe_exchanges * self.moe_exchange.seconds(scale)
            # Overlapped, an exchange hides behind the partner's compute only while both run,
            # and its kernels take SMs from that compute: a share of the shorter is saved.
            saved = cal.ep_overlap * np.minimum(exchanges, compute)
            hidden = np.where(self.unpaired > 0, saved, 0.0)
            ep = exchanges - hidden
            pace += ep
            # Each exchange is one MoE layer's forward or backward: half its host time, which
            # grows with the experts the rank runs.
            host = self.moe_exchanges * self.local_experts * cal.moe_expert_host_s / 2
        slowest = np.argmax(pace if host is None else np.maximum(pace, host), axis=0)
        configs = np.arange(n)
        per_micro_compute = compute[slowest, configs]
        per_micro_tp = tp[slowest, configs]
        per_micro_ep = np.zeros(n) if ep is None else ep[slowest, configs]
        hidden_ep = np.zeros(n) if hidden is None else hidden[slowest, configs]
        recompute = seconds(
            self.recompute_flops[slowest, configs],
            self.fp8_recompute_flops[slowest, configs],
            self.expert_recompute_flops[slowest, configs],
        )
        per_micro_cp = np.zeros(n)
        if self.context_parallel:
            cover = self.cp_block / rate if self.cp_hidden else 0.0
            forward = np.maximum(0.0, self.cp_send[0].seconds(scale) - cover)
            backward = np.maximum(0.0, self.cp_send[1].seconds(scale) - 2 * cover)
            ring = np.where(self.cp_ranks == 1, 0.0, (self.cp_ranks - 1) * (forward + backward))
            per_micro_cp = self.busiest * ring
        per_micro_host = np.zeros(n)
        if host is not None:  # the host issues on while the GPUs wait on the ring too
            busy = pace[slowest, configs] + per_micro_cp
            per_micro_host = np.maximum(0.0, host[slowest, configs] - busy)
        # A micro-batch without a partner exchanges in full, where its host wait leaves room.
        alone = np.maximum(hidden_ep, per_micro_host)
        # The bubble idles each rank for (p-1)/v micro-batches of the whole stage's work,
        # context-parallel exchange included; the pipeline fills and drains unpaired.
        bubble = self.bubble_share * (
            per_micro_compute + per_micro_tp + per_micro_cp + per_micro_ep + alone
        )
        dp_comm, dp_exposed = self._data_parallel(cal, per_micro_compute)
        return StepTime(
            compute_s=self.micro * per_micro_compute,
            recompute_s=self.micro * recompute,
            tp_comm_s=self.micro * per_micro_tp,
            pp_bubble_s=bubble,
            pp_p2p_s=self.p2p.seconds(scale),
            cp_comm_s=self.micro * per_micro_cp,
            ep_comm_s=self.micro * per_micro_ep + self.unpaired * (alone - per_micro_host),
            dp_comm_s=dp_comm,
            dp_exposed_s=dp_exposed,
            optimizer_s=self.optimizer,
            host_wait_s=self.micro * per_micro_host,
            offload_s=self.offload,
        )

    def _data_parallel(
        self, cal: Calibration, per_micro_compute: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(all data-parallel communication, the part not hidden behind the backward pass)."""
        grads = self.grads.seconds(cal.bandwidth_scale)
        gathers = self.gathers.seconds(cal.bandwidth_scale)
        total = grads + gathers
        if self.overlap == "per_flag":
            work = cal.overlap * self.micro * per_micro_compute
            exposed = self._exposed_per_flag(work, grads, gathers)
        else:
            overlaps = (self.overlap == "always") | (self.overlap_comm & (self.zero >= 1))
            # Gradient reductions hide behind the backward passes; ZeRO-3 / FSDP prefetching
            # hides parameter gathers behind the forward passes too.
            hidden_share = np.where(self.zero == 3, 1.0, 2 / 3)
            hideable = cal.overlap * hidden_share * self.micro * per_micro_compute
            last = total / self.n_buckets
            exposed = np.where(overlaps, np.maximum(last, total - hideable), total)
        return np.where(self.alone, 0.0, total), np.where(self.alone, 0.0, exposed)

    def _exposed_per_flag(
        self, work: np.ndarray, grads: np.ndarray, gathers: np.ndarray
    ) -> np.ndarray:
        """Gradient reduction hidden behind the backward passes only with `overlap_comm` (its
        last bucket stays exposed), and the distributed optimizer's parameter all-gather
        behind the next forward passes only with `overlap_param_gather` (Megatron-LM's two
        flags)."""
        hidden_grads = np.maximum(grads / self.n_buckets, grads - work * 2 / 3)
        exposed_grads = np.where(self.overlap_comm, hidden_grads, grads)
        hidden_gathers = np.maximum(0.0, gathers - work / 3)
        exposed_gathers = np.where(self.overlap_param_gather, hidden_gathers, gathers)
        return exposed_grads + exposed_gathers


def step_parts(
    w: Workload,
    c: ConfigTable,
    cluster: Cluster,
    traits: EngineTraits,
    collectives: tuple[CollectiveFit, ...] = (),
    runs: NcclRuns | None = None,
    stages: Stages | None = None,
) -> StepParts:
    """What `StepParts` holds, for each config of the table; `collectives` are the cluster's
    commbench fits, which take the place of the collective model where one matches. What
    no NCCL setting changes is computed once per run of a layout's NCCL variants (`runs`,
    the table's; `stages`, of the runs' layouts)."""
    runs = runs or c.nccl_runs()
    layouts = runs.layouts
    stages = stages or Stages.of(w, layouts, traits)
    domain = cluster.domain_size
    micro = c.grad_accum(w.global_batch_size)
    width = BYTES_PER_ELEMENT[w.precision]
    on_layouts = most_parameters(w, layouts, stages)
    held = HeldParameters(runs.spread(on_layouts.total), runs.spread(on_layouts.experts))
    activation = c.mbs * w.seq_length // c.cp * w.hidden_size * width
    tp_group = comm.place(c.tp, 1, domain)
    nccl = comm.NcclSettings.of(c.nccl_algo, c.nccl_proto)
    per_collective = comm.timing("all_reduce", activation, tp_group, cluster, nccl, collectives)
    selective = _selective_layer_flops(w, layouts)
    kinds = runs.spread(
        np.array(
            [
                _rank_work(w, layouts, layers, last, selective)
                for layers, last in stages.columns("pace")
            ]
        )
    )
    pp_group = comm.place(c.pp, c.tp * c.cp * c.dp, domain)
    latency, bandwidth = comm.over_links(cluster, pp_group)
    p2p_bytes = activation / np.where(c.tp > 1, c.tp, 1)
    transfers = np.where(c.pp == 1, 0.0, 2 * micro * c.vpp)
    # HSDP: each replica's dp/hsdp ranks shard the states (the inner mesh dimension), the
    # replicas all-reduce their shards.
    shards = state_shards(c)
    dense = _Reduced(
        held.dense,
        shards,
        comm.place(shards, c.tp, domain),
        comm.place(c.hsdp, c.tp * shards, domain),
    )
    grads, gathers, n_buckets = _data_parallel(
        w, c, cluster, traits, micro, dense, nccl, collectives
    )
    # Experts' gradients reduce, and their optimizer shards, over the expert data-parallel
    # ranks, laid out past the ep·etp ones.
    edp = expert_data_parallel(c)
    if w.is_moe:
        alone = comm.place(1, 1, domain)
        experts = _Reduced(held.experts, edp, comm.place(edp, c.ep * c.etp, domain), alone)
        expert_parts = _data_parallel(w, c, cluster, traits, micro, experts, nccl, collectives)
        grads, gathers = grads + expert_parts[0], gathers + expert_parts[1]
        n_buckets = n_buckets + np.where(edp > 1, expert_parts[2], 0)
    on_rank = held.dense / np.where(c.zero >= 1, shards, 1)
    on_rank = on_rank + held.experts / np.where(c.zero >= 1, edp, 1)
    optimizer = on_rank * (width * 2 + 16 + 4) / cluster.device.memory_bandwidth_bytes_per_s
    optimizer = np.where(c.offload_optimizer, 0.0, optimizer)  # the CPU's: `_offload`
    return StepParts(
        peak=_peak(w, cluster),
        width=w.hidden_size / c.tp,
        tokens=c.mbs * w.seq_length / c.cp,
        micro=micro,
        flops=kinds[:, 0],
        recompute_flops=kinds[:, 1],
        tp_collectives=kinds[:, 2],
        linear_flops=kinds[:, 8],
        tp_comm_overlap=c.tp_comm_overlap,
        unpaired=np.where(
            c.ep_comm_overlap,
            np.minimum(micro, (2 * (c.pp - 1) + (c.vpp - 1) * c.pp + 1) / c.vpp),
            0.0,
        ),
        moe_exchanges=kinds[:, 5],
        moe=w.is_moe,
        local_experts=np.maximum(w.num_moe_experts, 1) / c.ep,
        expert_flops=kinds[:, 6],
        expert_recompute_flops=kinds[:, 7],
        expert_width=np.maximum(w.expert_ffn_size, 1) / c.etp,
        fp8_flops=kinds[:, 3],
        fp8_recompute_flops=kinds[:, 4],
        fp8_peak=_fp8_peak(w, cluster),
        per_collective=per_collective,
        moe_exchange=_moe_exchange(w, c, cluster, nccl, collectives),
        busiest=runs.spread(stages.busiest),
        cp_ranks=c.cp,
        context_parallel=bool((c.cp > 1).any()),
        cp_send=_context_parallel_sends(w, c, cluster, traits.cp_gathers_kv),
        cp_hidden=not traits.cp_gathers_kv,
        cp_block=2 * c.mbs * (w.seq_length / c.cp) ** 2 * w.query_width / c.tp,
        bubble_share=(c.pp - 1) / c.vpp,
        p2p=comm.Timing(transfers * latency, transfers * (p2p_bytes / bandwidth)),
        grads=grads,
        gathers=gathers,
        n_buckets=n_buckets,
        overlap=traits.overlap,
        overlap_comm=c.overlap_comm,
        overlap_param_gather=c.overlap_param_gather,
        zero=c.zero,
        alone=(c.dp * c.cp == 1) & ((edp == 1) | (not w.is_moe)),
        optimizer=optimizer,
        offload=_offload(w, c, cluster, micro, held.total),
    )


def _selective_layer_flops(w: Workload, c: ConfigTable) -> tuple[np.ndarray, np.ndarray]:
    """Per layer and micro-batch, the forward FLOPs selective recomputation runs again
    (Megatron's `recompute_modules`): the attention core's scores and their product with the
    values (`core_attn`), the MLP's GEMMs (`mlp`); and of those, the ones in linear layers
    (FP8's). Activations and norms (`moe_act`, `layernorm`) cost next to no FLOPs."""
    mbs = c.mbs.astype(float)
    core = 4 * mbs * w.seq_length**2 * w.query_width
    mlp = 2 * mbs * w.seq_length * w.mean_layer_mlp_weights
    selective = c.recompute == "selective"
    core = np.where(selective & c.recomputes("core_attn"), core, 0.0)
    mlp = np.where(selective & c.recomputes("mlp"), mlp, 0.0)
    return (core + mlp) / (c.tp * c.cp), mlp / (c.tp * c.cp)


def _rank_work(
    w: Workload,
    c: ConfigTable,
    layers: np.ndarray,
    last: np.ndarray,
    selective: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, ...]:
    """One micro-batch on a pipeline rank of `layers`: (FLOPs, of which recomputation,
    tensor-parallel collectives, FLOPs in FP8 GEMMs, of which recomputation, MoE token
    exchanges: forward, backward and recomputed, FLOPs in routed experts' GEMMs, of which
    recomputation, FLOPs in linear layers' GEMMs). `selective`: a layer's selectively
    recomputed FLOPs, and of those the MLP's (which FP8 runs)."""
    mbs = c.mbs.astype(float)  # FLOPs outgrow int64 on large models
    split = c.tp * c.cp
    fwd = (layers * layer_forward_flops(w, mbs) + head_forward_flops(w, mbs) * last) / split
    rebuilt = recomputed_layers(w, c, layers)
    recompute_fwd = np.where(
        c.recompute == "full", rebuilt * layer_forward_flops(w, mbs) / split, 0.0
    )
    recompute_fwd = recompute_fwd + layers * selective[0]
    # In FP8: the linear layers' GEMMs, forward, backward and recomputed.
    fp8 = w.fp8 != "none"
    linear_gemms = layer_linear_forward_flops(w, mbs) / split
    linear = linear_gemms if fp8 else 0.0
    selective_linear = layers * selective[1] if fp8 else 0.0
    # Tensor-parallel collectives of a layer's forward: attention's and the MLP's; an MoE
    # layer's routed experts take none (tokens stay sequence-sharded into the dispatcher),
    # its shared expert takes the MLP's.
    per_layer = 2 - w.moe_share * (w.moe_shared_expert_intermediate_size == 0)
    # The routed experts' share of the MLP's GEMMs: a token passes through top-k of them.
    routed = w.moe_share * w.routed_weights
    routed_share = routed / w.mean_layer_mlp_weights if w.is_moe else 0.0
    experts = 2 * mbs * w.seq_length * routed / split
    expert_recompute = rebuilt * experts + layers * selective[1] * routed_share
    return (
        3 * fwd + recompute_fwd,
        recompute_fwd,
        2 * per_layer * layers + per_layer * rebuilt,
        (3 * layers + rebuilt) * linear + selective_linear,
        rebuilt * linear + selective_linear,
        w.moe_share * (2 * layers + rebuilt),
        3 * layers * experts + expert_recompute,
        expert_recompute,
        (3 * layers + rebuilt) * linear_gemms,
    )


CPU_ADAM_BYTES = 30
"""Host memory an offloaded Adam step moves per parameter: fp32 master, two moments and
the fp32 gradient read (16), master and moments written (12), the 16-bit copy (2)."""


def _offload(
    w: Workload, c: ConfigTable, cluster: Cluster, micro: np.ndarray, psi: np.ndarray
) -> np.ndarray:
    """Seconds a step spends on DeepSpeed's offload, per config (ZeRO-Offload, Ren et al.
    2021): the rank's gradient partition down and updated parameters up over its host link
    and the CPU Adam step over the host's memory bandwidth (`offload_optimizer`); under
    `offload_param`, each parameter partition up for every micro-batch's forward and
    backward. Gradients move every micro-batch: ZeRO 3 copies each micro-batch's partition
    down, ZeRO 1-2 accumulate on the host through the device (`async_accumulate_grad_in_
    cpu_via_gpu`: up and down again after the first)."""
    device = cluster.device
    part = psi / state_shards(c)
    width = BYTES_PER_ELEMENT[w.precision]
    grad_moves = np.where(c.zero == 3, micro, np.where(micro > 1, 2 * micro - 1, 1))
    step = part * (grad_moves + 1) * width / device.host_link_bytes_per_s
    step += part * CPU_ADAM_BYTES / device.host_memory_bandwidth_bytes_per_s
    fetch = 2 * micro * part * width / device.host_link_bytes_per_s
    return np.where(c.offload_optimizer, step, 0.0) + np.where(c.offload_param, fetch, 0.0)


def _moe_exchange(
    w: Workload,
    c: ConfigTable,
    cluster: Cluster,
    nccl: comm.NcclSettings,
    collectives: tuple[CollectiveFit, ...],
) -> comm.Timing:
    """One MoE layer's forward token exchange for one micro-batch (megatron-core's token
    dispatchers; backward mirrors it). Each rank routes its own share of the tokens,
    T = b·s/(cp·tp) under sequence parallelism. alltoall: dispatch and combine of its T·k
    routed copies over the expert-parallel group, and with etp > 1 an all-gather of what
    arrived and a reduce-scatter back over the expert tensor-parallel group. allgather: all
    T tokens gathered over the etp·ep ranks and reduce-scattered back."""
    if not w.is_moe:
        return comm.Timing(np.zeros(len(c)), np.zeros(len(c)))
    width = BYTES_PER_ELEMENT[w.precision]
    tokens = c.mbs * w.seq_length / (c.cp * c.tp)
    domain = cluster.domain_size
    chosen = c.moe_dispatcher == "alltoall"
    # Each dispatcher's bytes only on the rows that use it: the others cost no grouping.
    routed = np.where(chosen, tokens * w.moe_router_topk * w.hidden_size * width, 0.0)
    expert_tp = comm.place(c.etp, 1, domain)
    alltoall = comm.all_to_all(routed, comm.place(c.ep, c.etp, domain), cluster)
    alltoall = comm.Timing(2 * alltoall.fixed, 2 * alltoall.scaled)
    gather_and_scatter: tuple[Op, ...] = ("all_gather", "reduce_scatter")
    for op in gather_and_scatter:
        alltoall = alltoall + comm.timing(op, routed, expert_tp, cluster, nccl, collectives)
    gathered = comm.place(c.ep * c.etp, 1, domain)
    allgather = comm.Timing(np.zeros(len(c)), np.zeros(len(c)))
    plain = np.where(chosen, 0.0, tokens * w.hidden_size * width)
    for op in gather_and_scatter:
        allgather = allgather + comm.timing(op, plain, gathered, cluster, nccl, collectives)
    return comm.Timing(
        np.where(chosen, alltoall.fixed, allgather.fixed),
        np.where(chosen, alltoall.scaled, allgather.scaled),
    )


def _context_parallel_sends(
    w: Workload, c: ConfigTable, cluster: Cluster, gathers: bool
) -> tuple[comm.Timing, comm.Timing]:
    """One step of a layer's context-parallel ring for one micro-batch (Transformer Engine's
    p2p context parallelism): a rank passes its keys and values on (forward), and keys,
    values and their gradients (backward), each hidden behind the attention block the step
    computes; cp - 1 steps. `gathers` (torch's all-gather): the same bytes per peer, of keys
    and values repeated to the query's heads."""
    heads = w.num_attention_heads if gathers else w.num_query_groups
    kv_heads = np.maximum(1, heads // c.tp)
    kv_bytes = 2 * c.mbs * (w.seq_length // c.cp) * kv_heads * w.head_dim
    kv_bytes = kv_bytes * BYTES_PER_ELEMENT[w.precision]
    latency, bandwidth = comm.over_links(cluster, comm.place(c.cp, c.tp, cluster.domain_size))
    return (
        comm.Timing(latency, kv_bytes / bandwidth),
        comm.Timing(latency, 2 * kv_bytes / bandwidth),
    )


@dataclass(frozen=True)
class _Reduced:
    """Parameters whose gradients a step reduces: how many on the most loaded rank, over how
    many ranks sharded (or all-reduced, without ZeRO) and their group, and the group of
    replicas that all-reduce each shard (HSDP; one rank otherwise)."""

    psi: np.ndarray
    shards: np.ndarray
    group: comm.Group
    replicate: comm.Group


def _data_parallel(
    w: Workload,
    c: ConfigTable,
    cluster: Cluster,
    traits: EngineTraits,
    micro: np.ndarray,
    held: _Reduced,
    nccl: comm.NcclSettings,
    collectives: tuple[CollectiveFit, ...],
) -> tuple[comm.Timing, comm.Timing, np.ndarray]:
    """(gradient reduction, parameter gathers, buckets) of each config's step for `held`.
    Context-parallel ranks hold the same weights: dense gradients are reduced, and optimizer
    states sharded, over dp·cp ranks (Megatron's data-parallel group with cp; over dp·cp/hsdp
    under HSDP, whose replicas then all-reduce the shards); experts' over the expert
    data-parallel ranks."""
    psi, replicas, group = held.psi, held.shards, held.group
    t = traits
    width = BYTES_PER_ELEMENT[w.precision]
    if t.reduces_bf16_grads_in_fp32 and w.precision == "bf16":
        width = 4
    grad_bytes = psi * width
    bucket = c.reduce_bucket * width if t.bucket_unit == "elements" else c.ddp_bucket_mb * 2**20
    n_buckets = np.maximum(1, np.ceil(grad_bytes / bucket))
    if t.one_bucket_without_overlap:
        n_buckets = np.where(c.overlap_comm, n_buckets, 1)

    def bucketed(
        op: Op, rows: np.ndarray, over: comm.Group = group
    ) -> tuple[np.ndarray, np.ndarray]:
        """The op's (fixed, scaled) seconds over all buckets where it runs (0 elsewhere)."""
        shard = (
            grad_bytes / n_buckets / (replicas if over is not group or op != "all_reduce" else 1)
        )
        sizes, nodes = np.broadcast_arrays(over.size, over.nodes, np.zeros(len(c)))[:2]
        sub = comm.Group(sizes[rows], nodes[rows])
        one = comm.timing(op, shard[rows], sub, cluster, nccl.take(rows), collectives)
        fixed, scaled = np.zeros(len(c)), np.zeros(len(c))
        fixed[rows], scaled[rows] = n_buckets[rows] * one.fixed, n_buckets[rows] * one.scaled
        return fixed, scaled

    sharded = np.flatnonzero(c.zero >= 1)
    reduce = bucketed("all_reduce", np.flatnonzero(c.zero == 0))
    scatter = bucketed("reduce_scatter", sharded)
    across = bucketed("all_reduce", sharded, held.replicate)
    scatter = (scatter[0] + across[0], scatter[1] + across[1])
    gather = bucketed("all_gather", sharded)
    # ZeRO-2/3 and FSDP reduce every micro-batch; ZeRO-3 gathers parameters for forward and
    # backward.
    per_step = np.where((c.zero >= 2) & (micro > 1), micro, 1)
    gathered = np.where(c.zero == 3, 2 * micro, 1)
    grads = comm.Timing((reduce[0] + scatter[0]) * per_step, (reduce[1] + scatter[1]) * per_step)
    gathers = comm.Timing(gather[0] * gathered, gather[1] * gathered)
    return grads, gathers, n_buckets
