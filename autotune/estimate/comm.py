"""Collective time on a cluster: NCCL's model on GPU fabrics, alpha-beta rings on gloo hosts.

Groups are placed as Megatron orders ranks (tp innermost, then cp, dp, then pp), so a group's
stride decides how many of its ranks share an NVLink domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.estimate.arrays import grouped
from autotune.estimate.collectives import Fabric, Op, bus_factor, collective_times, nccl_bytes
from autotune.estimate.commfit import CollectiveFit, matching_fit
from autotune.specs import Cluster


@dataclass(frozen=True)
class Group:
    """A communication group's size and the NVLink domains it spans (a node each, but for
    rack-scale NVLink): of one config, or arrays of them, one per config of a table."""

    size: np.ndarray
    nodes: np.ndarray


def place(size: np.ndarray | int, stride: np.ndarray | int, domain_size: int) -> Group:
    """Groups of `size` ranks spaced `stride` apart: how many NVLink domains (nodes, or racks
    of an NVL72) each spans; inside one, a group talks over NVLink."""
    size = np.asarray(size)
    per_domain = np.where(
        stride < domain_size, np.maximum(1, np.minimum(size, domain_size // stride)), 1
    )
    return Group(size=size, nodes=-(-size // per_domain))


def over_links(cluster: Cluster, group: Group) -> tuple[np.ndarray, np.ndarray]:
    """(latency s, bandwidth bytes/s) of the link each group's point-to-point traffic takes:
    NVLink inside a domain, the network across."""
    intra, inter = cluster.intra_link, cluster.inter_link
    within = group.nodes == 1
    return (
        np.where(within, intra.latency_s, inter.latency_s),
        np.where(within, intra.bandwidth_bytes_per_s, inter.bandwidth_bytes_per_s),
    )


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
    per_rank_bytes: np.ndarray | float,
    group: Group,
    cluster: Cluster,
    algo: np.ndarray | str = "default",
    proto: np.ndarray | str = "default",
    bandwidth_scale: float = 1.0,
    fits: tuple[CollectiveFit, ...] = (),
) -> np.ndarray:
    """One collective per config over its group: from the cluster's commbench fit where one
    matches, else the model, with `bandwidth_scale` the calibrated share of its bandwidth the
    fabric really delivers. Configs with the same group and NCCL setting are computed
    together."""
    nbytes, sizes, spans, algo, proto = np.broadcast_arrays(
        np.atleast_1d(np.asarray(per_rank_bytes, dtype=float)),
        np.atleast_1d(group.size),
        np.atleast_1d(group.nodes),
        np.atleast_1d(np.asarray(algo, dtype=str)),
        np.atleast_1d(np.asarray(proto, dtype=str)),
    )
    out = np.zeros(nbytes.shape)
    active = np.flatnonzero((sizes > 1) & (nbytes > 0))
    nccl = fabric(cluster)
    for (size, nodes, a, p), rows in grouped(
        sizes[active], spans[active], algo[active], proto[active]
    ):
        at = active[rows]
        fit = matching_fit(fits, op, nodes, size, a, p)
        if fit is not None:
            out[at] = fit.seconds(nbytes[at], size)
        elif nccl is not None:
            t, chosen = collective_times(op, nbytes[at], size, nodes, nccl, a, p)
            latency = chosen.latency_us * 1e-6
            out[at] = latency + (t - latency) / bandwidth_scale
        else:
            link = cluster.intra_link if nodes == 1 else cluster.inter_link
            steps = 2 * (size - 1) if op == "all_reduce" else size - 1
            moved = nccl_bytes(op, nbytes[at], size) * bus_factor(op, size)
            out[at] = steps * link.latency_s + moved / (
                link.bandwidth_bytes_per_s * bandwidth_scale
            )
    return out
