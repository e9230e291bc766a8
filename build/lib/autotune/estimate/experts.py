"""Mixture-of-experts costs beside the experts' GEMMs: each MoE layer's tokens sent to their
experts and back (megatron-core's dispatchers), twice forward and twice backward, hidden in
part behind a paired micro-batch's compute under Megatron's `ep_comm_overlap`; and the host's
time to issue the layer's kernels, which the GPUs wait for when it is the longer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.estimate import comm
from autotune.estimate.calibration import Calibration
from autotune.estimate.collectives import Op
from autotune.estimate.commfit import CollectiveFit
from autotune.space.table import ConfigTable
from autotune.specs import Cluster, Workload
from autotune.specs.workload import BYTES_PER_ELEMENT


@dataclass(frozen=True)
class Experts:
    moe: bool
    """A mixture of experts: its exchanges are counted (none otherwise)."""
    exchange: comm.Timing
    """One MoE layer's forward token exchange for one micro-batch (`moe_exchange`)."""
    unpaired: np.ndarray
    """Megatron's expert-parallel overlap (0 without it): each micro-batch's token exchanges
    hide behind the compute of the micro-batch paired with it, but the schedule's warm-up
    forwards and cool-down backwards have no partner. Micro-batches' worth of a rank's
    passes that run without a partner:
    megatron-core's warm-up chunks on the first rank, 2(p-1) + (v-1)p + 1 of a micro-batch's
    v chunks (one without a pipeline: the first forward and the last backward), at most all."""
    local_experts: np.ndarray
    """Routed experts on a rank (experts / ep), each of whose GEMMs the host issues."""
    width: np.ndarray
    """A routed expert's GEMMs' narrow side: its width over etp."""

    @classmethod
    def of(
        cls,
        w: Workload,
        c: ConfigTable,
        cluster: Cluster,
        micro: np.ndarray,
        nccl: comm.NcclSettings,
        collectives: tuple[CollectiveFit, ...],
    ) -> Experts:
        return cls(
            moe=w.is_moe,
            exchange=moe_exchange(w, c, cluster, nccl, collectives),
            unpaired=np.where(
                c.ep_comm_overlap,
                np.minimum(micro, (2 * (c.pp - 1) + (c.vpp - 1) * c.pp + 1) / c.vpp),
                0.0,
            ),
            local_experts=np.maximum(w.num_moe_experts, 1) / c.ep,
            width=np.maximum(w.expert_ffn_size, 1) / c.etp,
        )

    def pace(
        self, cal: Calibration, exchanges: np.ndarray, compute: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per kind of pipeline rank and config, of one micro-batch with `exchanges` MoE
        token exchanges and `compute` seconds: (exchange seconds not hidden, those hidden by
        the overlap, the host's time to issue its MoE layers)."""
        seconds = exchanges * self.exchange.seconds(cal.bandwidth_scale)
        # Overlapped, an exchange hides behind the partner's compute only while both run,
        # and its kernels take SMs from that compute: a share of the shorter is saved.
        saved = cal.ep_overlap * np.minimum(seconds, compute)
        hidden = np.where(self.unpaired > 0, saved, 0.0)
        # Each exchange is one MoE layer's forward or backward: half its host time, which
        # grows with the experts the rank runs.
        host = exchanges * self.local_experts * cal.moe_expert_host_s / 2
        return seconds - hidden, hidden, host


def moe_exchange(
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
