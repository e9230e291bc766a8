"""Data parallelism's communication: gradient reduction (all-reduce, or under ZeRO
reduce-scatter and the parameters' all-gather, per micro-batch at ZeRO 2-3, parameter gathers
for forward and backward at ZeRO 3) in buckets, partly hidden behind the backward pass as
the engine overlaps it; experts' gradients over the expert data-parallel ranks; HSDP's
replicas all-reducing their shards; and the optimizer step over the states ZeRO leaves on a
rank."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.estimate import comm
from autotune.estimate.calibration import Calibration
from autotune.estimate.collectives import Op
from autotune.estimate.commfit import CollectiveFit
from autotune.estimate.model_states import HeldParameters, expert_data_parallel, state_shards
from autotune.estimate.traits import EngineTraits
from autotune.space.table import ConfigTable
from autotune.specs import Cluster, Workload
from autotune.specs.workload import BYTES_PER_ELEMENT


@dataclass(frozen=True)
class DataParallel:
    """A step's data-parallel communication before calibration, and what decides how much
    of it the backward pass hides."""

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

    def seconds(
        self, cal: Calibration, micro: np.ndarray, per_micro_compute: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(all data-parallel communication, the part not hidden behind the backward pass)."""
        grads = self.grads.seconds(cal.bandwidth_scale)
        gathers = self.gathers.seconds(cal.bandwidth_scale)
        total = grads + gathers
        if self.overlap == "per_flag":
            work = cal.overlap * micro * per_micro_compute
            exposed = self._exposed_per_flag(work, grads, gathers)
        else:
            overlaps = (self.overlap == "always") | (self.overlap_comm & (self.zero >= 1))
            # Gradient reductions hide behind the backward passes; ZeRO-3 / FSDP prefetching
            # hides parameter gathers behind the forward passes too.
            hidden_share = np.where(self.zero == 3, 1.0, 2 / 3)
            hideable = cal.overlap * hidden_share * micro * per_micro_compute
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


@dataclass(frozen=True)
class Reduced:
    """Parameters whose gradients a step reduces: how many on the most loaded rank, over how
    many ranks sharded (or all-reduced, without ZeRO) and their group, and the group of
    replicas that all-reduce each shard (HSDP; one rank otherwise)."""

    psi: np.ndarray
    shards: np.ndarray
    group: comm.Group
    replicate: comm.Group


def data_parallel(
    w: Workload,
    c: ConfigTable,
    cluster: Cluster,
    traits: EngineTraits,
    micro: np.ndarray,
    held: HeldParameters,
    nccl: comm.NcclSettings,
    collectives: tuple[CollectiveFit, ...],
) -> DataParallel:
    """Each config's data-parallel communication for the parameters its most loaded rank
    holds. HSDP: each replica's dp/hsdp ranks shard the states (the inner mesh dimension),
    the replicas all-reduce their shards. Experts' gradients reduce, and their optimizer
    shards, over the expert data-parallel ranks, laid out past the ep·etp ones."""
    domain = cluster.domain_size
    shards = state_shards(c)
    dense = Reduced(
        held.dense,
        shards,
        comm.place(shards, c.tp, domain),
        comm.place(c.hsdp, c.tp * shards, domain),
    )
    grads, gathers, n_buckets = _reduction(w, c, cluster, traits, micro, dense, nccl, collectives)
    edp = expert_data_parallel(c)
    if w.is_moe:
        alone = comm.place(1, 1, domain)
        experts = Reduced(held.experts, edp, comm.place(edp, c.ep * c.etp, domain), alone)
        expert_parts = _reduction(w, c, cluster, traits, micro, experts, nccl, collectives)
        grads, gathers = grads + expert_parts[0], gathers + expert_parts[1]
        n_buckets = n_buckets + np.where(edp > 1, expert_parts[2], 0)
    return DataParallel(
        grads=grads,
        gathers=gathers,
        n_buckets=n_buckets,
        overlap=traits.overlap,
        overlap_comm=c.overlap_comm,
        overlap_param_gather=c.overlap_param_gather,
        zero=c.zero,
        alone=(c.dp * c.cp == 1) & ((edp == 1) | (not w.is_moe)),
    )


def _reduction(
    w: Workload,
    c: ConfigTable,
    cluster: Cluster,
    traits: EngineTraits,
    micro: np.ndarray,
    held: Reduced,
    nccl: comm.NcclSettings,
    collectives: tuple[CollectiveFit, ...],
) -> tuple[comm.Timing, comm.Timing, np.ndarray]:
    """(gradient reduction, parameter gathers, buckets) of each config's step for `held`.
    Context-parallel ranks hold the same weights: dense gradients are reduced, and optimizer
    states sharded, over dp·cp ranks (Megatron's data-parallel group with cp; over dp·cp/hsdp
    under HSDP, whose replicas then all-reduce the shards); experts' over the expert
    data-parallel ranks."""
    psi, replicas, group = held.psi, held.shards, held.group
    width = BYTES_PER_ELEMENT[w.precision]
    if traits.reduces_bf16_grads_in_fp32 and w.precision == "bf16":
        width = 4
    grad_bytes = psi * width
    in_elements = traits.bucket_unit == "elements"
    bucket = c.reduce_bucket * width if in_elements else c.ddp_bucket_mb * 2**20
    n_buckets = np.maximum(1, np.ceil(grad_bytes / bucket))
    if traits.one_bucket_without_overlap:
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


def optimizer_seconds(
    w: Workload, c: ConfigTable, cluster: Cluster, held: HeldParameters
) -> np.ndarray:
    """One pass of the optimizer over the states on the rank at memory bandwidth: dense
    states sharded over dp·cp/hsdp ranks and experts' over the expert data-parallel ones
    under ZeRO; the CPU's under optimizer offload (`offload.offload_seconds`)."""
    width = BYTES_PER_ELEMENT[w.precision]
    on_rank = held.dense / np.where(c.zero >= 1, state_shards(c), 1)
    on_rank = on_rank + held.experts / np.where(c.zero >= 1, expert_data_parallel(c), 1)
    optimizer = on_rank * (width * 2 + 16 + 4) / cluster.device.memory_bandwidth_bytes_per_s
    return np.where(c.offload_optimizer, 0.0, optimizer)
