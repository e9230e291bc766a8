"""Collective time on a cluster: NCCL's model on GPU fabrics, alpha-beta rings on gloo hosts.

Groups are placed as Megatron orders ranks (tp innermost, then cp, dp, then pp), so a group's
stride decides how many of its ranks share an NVLink domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.estimate.collectives import Fabric, Op, bus_factor, collective_time, nccl_bytes
from autotune.estimate.commfit import CollectiveFit, matching_fit
from autotune.specs import Cluster


@dataclass(frozen=True)
class Group:
    size: int
    nodes: int
    """NVLink domains the group spans (a node each, but for rack-scale NVLink)."""


def place(size: int, stride: int, domain_size: int) -> Group:
    """A group of `size` ranks spaced `stride` apart: how many NVLink domains (nodes, or
    racks of an NVL72) it spans; inside one, it talks over NVLink."""
    per_domain = max(1, min(size, domain_size // stride)) if stride < domain_size else 1
    return Group(size=size, nodes=math.ceil(size / per_domain))


def fabric(cluster: Cluster) -> Fabric | None:
    """NCCL's view of the cluster; Blackwell is priced with Hopper's tuning constants on its
    own links until NCCL's SM100 tables are in (both have NVSwitch and NVLink SHARP)."""
    generation = cluster.device.generation
    if cluster.backend != "nccl" or generation not in ("ampere", "hopper", "blackwell"):
        return None
    return Fabric(
        generation="ampere" if generation == "ampere" else "hopper",
        nvlink_gbps=cluster.intra_link.bandwidth_bytes_per_s / 1e9,
        nic_gbps=cluster.inter_link.bandwidth_bytes_per_s / 1e9,
    )


def seconds(
    op: Op,
    per_rank_bytes: float,
    group: Group,
    cluster: Cluster,
    algo: str = "default",
    proto: str = "default",
    bandwidth_scale: float = 1.0,
    fits: tuple[CollectiveFit, ...] = (),
) -> float:
    """One collective over `group`: from the cluster's commbench fit where one matches, else
    the model, with `bandwidth_scale` the calibrated share of its bandwidth the fabric
    really delivers."""
    if group.size <= 1 or per_rank_bytes <= 0:
        return 0.0
    fit = matching_fit(fits, op, group.nodes, group.size, algo, proto)
    if fit is not None:
        return fit.seconds(per_rank_bytes, group.size)
    nccl = fabric(cluster)
    if nccl is not None:
        t, choice = collective_time(op, per_rank_bytes, group.size, group.nodes, nccl, algo, proto)
        latency = choice.latency_us * 1e-6
        return latency + (t - latency) / bandwidth_scale
    link = cluster.intra_link if group.nodes == 1 else cluster.inter_link
    n = group.size
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    moved = nccl_bytes(op, per_rank_bytes, n) * bus_factor(op, n)
    return steps * link.latency_s + moved / (link.bandwidth_bytes_per_s * bandwidth_scale)
