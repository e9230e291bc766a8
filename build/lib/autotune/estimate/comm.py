"""Collective time on a cluster: NCCL's model on GPU fabrics, alpha-beta rings on gloo hosts.

Groups are placed as Megatron orders ranks (tp innermost, then cp, dp, then pp), so a group's
stride decides how many of its ranks share an NVLink domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.estimate.arrays import grouped
from autotune.estimate.collectives import (
    Fabric,
    Op,
    bus_factor,
    collective_times,
    nccl_bytes,
)
from autotune.estimate.commfit import CollectiveFit, matching_fit
from autotune.estimate.nccl_tables import GENERATIONS
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
    """NCCL's view of the cluster: its tuning constants and search speeds for the GPU
    generation (Blackwell's are SM100's), its links' bandwidths."""
    known = [g for g in GENERATIONS if g == cluster.device.generation]
    if cluster.backend != "nccl" or not known:
        return None
    return Fabric(
        generation=known[0],
        nvlink_gbps=cluster.intra_link.bandwidth_bytes_per_s / 1e9,
        nic_gbps=cluster.inter_link.bandwidth_bytes_per_s / 1e9,
        x86_host=not cluster.device.arm_host,
    )


@dataclass(frozen=True)
class Timing:
    """Communication seconds per config as `fixed + scaled / bandwidth_scale`: the calibrated
    share of its bandwidth the fabric delivers divides only the part that moves bytes (a
    commbench fit, measured on the fabric, is all fixed). Computed once, a timing serves every
    calibration a search tries."""

    fixed: np.ndarray
    scaled: np.ndarray

    def seconds(self, bandwidth_scale: float) -> np.ndarray:
        return self.fixed + self.scaled / bandwidth_scale

    def __add__(self, other: Timing) -> Timing:
        return Timing(self.fixed + other.fixed, self.scaled + other.scaled)


@dataclass(frozen=True)
class NcclSettings:
    """Each config's NCCL algorithm and protocol, as a number into `names`: configs are
    grouped by it, and numbers group faster than words."""

    codes: np.ndarray
    names: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, algo: np.ndarray | str, proto: np.ndarray | str) -> NcclSettings:
        algo, proto = np.broadcast_arrays(
            np.atleast_1d(np.asarray(algo, dtype=str)), np.atleast_1d(np.asarray(proto, dtype=str))
        )
        names: dict[tuple[str, str], int] = {}
        codes = np.empty(len(algo), dtype=np.int64)
        for (a, p), rows in grouped(algo, proto):
            codes[rows] = names.setdefault((a, p), len(names))
        return cls(codes, tuple(names))

    def take(self, rows: np.ndarray) -> NcclSettings:
        return NcclSettings(self.codes[rows], self.names)


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
    fabric really delivers."""
    settings = NcclSettings.of(algo, proto)
    return timing(op, per_rank_bytes, group, cluster, settings, fits).seconds(bandwidth_scale)


def timing(
    op: Op,
    per_rank_bytes: np.ndarray | float,
    group: Group,
    cluster: Cluster,
    nccl_settings: NcclSettings,
    fits: tuple[CollectiveFit, ...] = (),
) -> Timing:
    """`seconds` before calibration. Configs with the same group and NCCL setting are
    computed together."""
    nbytes, sizes, spans, setting = np.broadcast_arrays(
        np.atleast_1d(np.asarray(per_rank_bytes, dtype=float)),
        np.atleast_1d(group.size),
        np.atleast_1d(group.nodes),
        nccl_settings.codes,
    )
    fixed, scaled = np.zeros(nbytes.shape), np.zeros(nbytes.shape)
    active = np.flatnonzero((sizes > 1) & (nbytes > 0))
    nccl = fabric(cluster)
    for (size, nodes, code), rows in grouped(sizes[active], spans[active], setting[active]):
        at = active[rows]
        a, p = nccl_settings.names[code]
        fit = matching_fit(fits, op, nodes, size, a, p)
        if fit is not None:
            fixed[at] = fit.seconds(nbytes[at], size)
        elif nccl is not None:
            t, chosen = collective_times(op, nbytes[at], size, nodes, nccl, a, p)
            fixed[at] = chosen.latency_us * 1e-6
            scaled[at] = t - fixed[at]
        else:
            link = cluster.intra_link if nodes == 1 else cluster.inter_link
            steps = 2 * (size - 1) if op == "all_reduce" else size - 1
            moved = nccl_bytes(op, nbytes[at], size) * bus_factor(op, size)
            fixed[at] = steps * link.latency_s
            scaled[at] = moved / link.bandwidth_bytes_per_s
    return Timing(fixed, scaled)


def all_to_all(per_rank_bytes: np.ndarray | float, group: Group, cluster: Cluster) -> Timing:
    """One all-to-all per config: each rank sends an n-th of its bytes to each peer, all at
    once (NCCL runs it as grouped point-to-point sends, outside its collective model and its
    algorithm and protocol settings). The peers in its NVLink domain get theirs over NVLink,
    the rest over the network; the slower share sets the time."""
    size, nodes = np.asarray(group.size), np.asarray(group.nodes)
    nbytes = np.asarray(per_rank_bytes, dtype=float)
    per_domain = -(-size // nodes)
    intra, inter = cluster.intra_link, cluster.inter_link
    within = (per_domain - 1) / size / intra.bandwidth_bytes_per_s
    across = (size - per_domain) / size / inter.bandwidth_bytes_per_s
    latency = np.where(nodes > 1, inter.latency_s, intra.latency_s)
    active = size > 1
    return Timing(
        np.where(active, latency, 0.0), np.where(active, nbytes * np.maximum(within, across), 0.0)
    )
