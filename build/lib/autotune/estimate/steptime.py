"""Step time of each config of a table, broken down by where the time goes: the parts
(`StepParts`, computed once per table) composed under a calibration (`StepParts.time`).

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
Each cost has its module: `compute` (GEMM rates), `rank_work` (a micro-batch on each kind of
pipeline rank), `pipeline`, `context_parallel`, `experts`, `data_parallel`, `offload`.
Formulas: shared research comm_cost_model.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, Generic, TypeVar

import numpy as np

from autotune.estimate import comm
from autotune.estimate.calibration import Calibration
from autotune.estimate.commfit import CollectiveFit
from autotune.estimate.compute import GemmRates, fp8_peak_flops, peak_flops
from autotune.estimate.context_parallel import ContextParallel
from autotune.estimate.data_parallel import DataParallel, data_parallel, optimizer_seconds
from autotune.estimate.experts import Experts
from autotune.estimate.model_states import HeldParameters, most_parameters
from autotune.estimate.offload import offload_seconds
from autotune.estimate.pipeline import Pipeline
from autotune.estimate.rank_work import RankWork
from autotune.estimate.stages import Stages
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


@dataclass(frozen=True)
class StepParts:
    """A table's step times before calibration: FLOPs, communication timings and what decides
    overlap, from which `time(cal)` is a few array operations per config (a search refits the
    model after every trial and predicts every candidate again)."""

    peak: float
    fp8_peak: float | None
    """FP8 GEMMs' peak (None without FP8)."""
    width: np.ndarray
    """h / tp: a GEMM's narrow side."""
    tokens: np.ndarray
    """Tokens per micro-batch on a rank: a GEMM's long side."""
    micro: np.ndarray
    work: RankWork
    """Per kind of pipeline rank and config: one micro-batch's work."""
    per_collective: comm.Timing
    """One tensor-parallel all-reduce of a micro-batch's activations."""
    tp_comm_overlap: np.ndarray
    experts: Experts
    context: ContextParallel
    pipeline: Pipeline
    data: DataParallel
    optimizer: np.ndarray
    offload: np.ndarray

    def take(self, rows: np.ndarray) -> StepParts:
        """The parts of these configs, in this order: a search predicts only the candidates
        it may still propose."""
        taken: StepParts = _rows_of(self, rows, len(self.micro))
        return taken

    def time(self, cal: Calibration) -> StepTime[np.ndarray]:
        scale, n, work = cal.bandwidth_scale, len(self.micro), self.work
        rates = GemmRates.at(
            cal,
            self.peak,
            self.fp8_peak,
            self.width,
            self.experts.width,
            self.tokens,
            self.experts.moe,
        )
        # The pipeline moves at the pace of its slowest rank: its layers' compute and
        # tensor-parallel collectives, plus the output layer on the last rank.
        compute = rates.seconds(work.flops, work.fp8_flops, work.expert_flops)
        tp = self._tp_seconds(rates, scale)
        pace, ep, hidden, host = compute + tp, None, None, None
        if self.experts.moe:  # a search refits often: dense tables skip what is zero for them
            ep, hidden, host = self.experts.pace(cal, work.moe_exchanges, compute)
            pace += ep
        slowest = np.argmax(pace if host is None else np.maximum(pace, host), axis=0)
        at = (slowest, np.arange(n))
        per_micro_compute, per_micro_tp = compute[at], tp[at]
        per_micro_ep = np.zeros(n) if ep is None else ep[at]
        hidden_ep = np.zeros(n) if hidden is None else hidden[at]
        recompute = rates.seconds(
            work.recompute_flops[at], work.fp8_recompute_flops[at], work.expert_recompute_flops[at]
        )
        per_micro_cp = self.context.per_micro(rates.rate, scale)
        per_micro_host = np.zeros(n)
        if host is not None:  # the host issues on while the GPUs wait on the ring too
            per_micro_host = np.maximum(0.0, host[at] - (pace[at] + per_micro_cp))
        # A micro-batch without a partner exchanges in full, where its host wait leaves room.
        alone = np.maximum(hidden_ep, per_micro_host)
        # The bubble idles each rank for (p-1)/v micro-batches of the whole stage's work,
        # context-parallel exchange included; the pipeline fills and drains unpaired.
        bubble = self.pipeline.bubble(
            per_micro_compute + per_micro_tp + per_micro_cp + per_micro_ep + alone
        )
        dp_comm, dp_exposed = self.data.seconds(cal, self.micro, per_micro_compute)
        return StepTime(
            compute_s=self.micro * per_micro_compute,
            recompute_s=self.micro * recompute,
            tp_comm_s=self.micro * per_micro_tp,
            pp_bubble_s=bubble,
            pp_p2p_s=self.pipeline.p2p.seconds(scale),
            cp_comm_s=self.micro * per_micro_cp,
            ep_comm_s=self.micro * per_micro_ep + self.experts.unpaired * (alone - per_micro_host),
            dp_comm_s=dp_comm,
            dp_exposed_s=dp_exposed,
            optimizer_s=self.optimizer,
            host_wait_s=self.micro * per_micro_host,
            offload_s=self.offload,
        )

    def _tp_seconds(self, rates: GemmRates, bandwidth_scale: float) -> np.ndarray:
        """Per kind of pipeline rank and config, one micro-batch's tensor-parallel
        collectives. With --tp-comm-overlap each all-gather and reduce-scatter runs in chunks
        beside the GEMM it feeds or follows (attention's, the dense or shared MLP's: routed
        experts take no TP collective); what those GEMMs cannot cover stays exposed."""
        tp = self.work.tp_collectives * self.per_collective.seconds(bandwidth_scale)
        gemms = (self.work.linear_flops - self.work.expert_flops) / rates.linear
        return np.where(self.tp_comm_overlap, np.maximum(0.0, tp - gemms), tp)


def _rows_of(value: Any, rows: np.ndarray, n: int) -> Any:
    """`value` (parts of a table of `n` configs) of these rows: arrays per config (their last
    axis), inside tuples and dataclasses; what is the same for every config as it is."""
    if isinstance(value, np.ndarray) and value.ndim and value.shape[-1] == n:
        return value[..., rows]  # per config, or per kind of rank and config
    if isinstance(value, tuple):
        return tuple(_rows_of(v, rows, n) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(
            value, **{f.name: _rows_of(getattr(value, f.name), rows, n) for f in fields(value)}
        )
    return value


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
    micro = c.grad_accum(w.global_batch_size)
    on_layouts = most_parameters(w, layouts, stages)
    held = HeldParameters(runs.spread(on_layouts.total), runs.spread(on_layouts.experts))
    activation = c.mbs * w.seq_length // c.cp * w.hidden_size * BYTES_PER_ELEMENT[w.precision]
    tp_group = comm.place(c.tp, 1, cluster.domain_size)
    nccl = comm.NcclSettings.of(c.nccl_algo, c.nccl_proto)
    return StepParts(
        peak=peak_flops(w, cluster),
        fp8_peak=fp8_peak_flops(w, cluster),
        width=w.hidden_size / c.tp,
        tokens=c.mbs * w.seq_length / c.cp,
        micro=micro,
        work=RankWork.of(w, layouts, stages, runs),
        per_collective=comm.timing("all_reduce", activation, tp_group, cluster, nccl, collectives),
        tp_comm_overlap=c.tp_comm_overlap,
        experts=Experts.of(w, c, cluster, micro, nccl, collectives),
        context=ContextParallel.of(w, c, cluster, traits, runs.spread(stages.busiest)),
        pipeline=Pipeline.of(c, cluster, micro, activation),
        data=data_parallel(w, c, cluster, traits, micro, held, nccl, collectives),
        optimizer=optimizer_seconds(w, c, cluster, held),
        offload=offload_seconds(w, c, cluster, micro, held.total),
    )
