"""Collective time by NCCL's own cost model (src/graph/tuning.cc, v2.30 constants).

time = latency(algo, proto) + bytes / algorithm_bandwidth(algo, proto), per algorithm
(Ring, Tree, NVLS, NVLSTree) and protocol (LL, LL128, Simple); "default" is NCCL's argmin.
Constants and formulas: shared research comm_cost_model.md §1.1-1.6. The topology search
is replaced by the graph presets derived there (§1.6): they reproduce the measured busbw
plateaus of DGX-A100 and DGX-H100 (§4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Literal, TypeVar

import numpy as np

from autotune.estimate.nccl_tables import (
    ALGOS,
    BASE_LATENCY_US,
    HW_LATENCY_US,
    LL_MAX_BW,
    NET_OVERHEAD_US,
    NVLS_ARITY,
    NVLS_EFFICIENCY,
    PCIE_BW,
    PER_CH_MAX_NVLS_TREE,
    PER_CH_MAX_RING_LL128,
    PER_CH_MAX_TREE,
    PER_CH_MAX_TREE_LL128,
    PROTOS,
    SPEEDS_INTER,
    SPEEDS_INTRA,
    TREE_CORRECTION,
    Generation,
)

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
T = TypeVar("T", float, np.ndarray)


@dataclass(frozen=True)
class Fabric:
    """What NCCL's model needs of a machine: GPU generation and per-GPU link bandwidths."""

    generation: Generation
    nvlink_gbps: float
    """Per GPU, one direction, as NCCL models NVLink (A100 240, H100 370.8, B200 721.8)."""
    nic_gbps: float
    """Per GPU, one direction (NDR 50, HDR 25)."""
    nvswitch: bool = True
    x86_host: bool = True
    """NCCL corrects Blackwell's NVLSTree all-reduce by size only on x86 hosts (DGX B200's
    Xeons, not GB200's Grace)."""
    nccl_version: tuple[int, int, int] = (2, 30, 7)
    """Constants follow the NCCL release (§1.8); only NVLSTree's network latency differs
    between the releases this model covers (14 us before 2.28.9, 20.9 us from it)."""


@dataclass(frozen=True)
class Graph:
    channels: int
    bw_intra: float
    bw_inter: float


def _fastest(speeds: tuple[float, ...], fits: float) -> float:
    return next((s for s in speeds if s <= fits), speeds[-1])


def ring_graph(f: Fabric, nodes: int, ppn: int) -> Graph:
    """Ring/Tree graph: 6 channels doubled to 12 inside a node; a rail channel per GPU across
    nodes, each limited by the NIC (through PCIe) and by 8 channels sharing the NVLink
    budget, as derived for DGX nodes (§1.6), or more where a domain holds more GPUs (an
    NVL72 rack)."""
    if nodes == 1:
        bw = _fastest(SPEEDS_INTRA[f.generation], f.nvlink_gbps / 6) / 2
        return Graph(channels=12, bw_intra=bw, bw_inter=bw)
    nic = min(f.nic_gbps, PCIE_BW[f.generation])
    bw = _fastest(SPEEDS_INTER[f.generation], min(nic, f.nvlink_gbps / max(8, ppn)))
    return Graph(channels=ppn, bw_intra=bw, bw_inter=bw)


def nvls_graph(f: Fabric, nodes: int, ppn: int) -> Graph | None:
    """NVLink SHARP: Hopper or Blackwell with NVSwitch; a channel per GPU up to NCCL's
    NVLS arity (32), and (channels+1)·bw must fit the NVLink budget."""
    if f.generation == "ampere" or not f.nvswitch or ppn < 2:
        return None
    channels = min(ppn, NVLS_ARITY)
    bw = _fastest(SPEEDS_INTRA[f.generation], f.nvlink_gbps / (channels + 1))
    # One node: nothing leaves it. (§1.6 derives a bwInter of 60 here, marked unverified;
    # measured NVLS on 5-8 GPUs, §4 row 6, shows no such cap.) Else the NIC through PCIe.
    inter = math.inf if nodes == 1 else min(f.nic_gbps, PCIE_BW[f.generation])
    return Graph(channels=channels, bw_intra=bw, bw_inter=inter)


@dataclass(frozen=True)
class Choice:
    algo: str
    proto: str
    latency_us: float
    algbw_gbps: float

    def time_s(self, nbytes: float) -> float:
        return (self.latency_us + nbytes / (1000 * self.algbw_gbps)) * 1e-6


def _steps(op: Op, n: int) -> int:
    return {
        "all_reduce": 2 * (n - 1),
        "all_gather": n - 1,
        "reduce_scatter": n - 1,
        "broadcast": n,
    }[op]


def _col(nodes: int) -> int:
    return min(nodes - 1, 2) if nodes <= 2 else 2


def _offers(op: Op, algo: str, proto: str, nodes: int) -> bool:
    """Whether NCCL runs this collective with this algorithm and protocol at all."""
    if algo in ("NVLS", "NVLSTree") and proto != "Simple":
        return False
    if op == "broadcast" and algo != "Ring":
        return False
    if op in ("all_gather", "reduce_scatter") and algo in ("Tree", "NVLSTree"):
        return False
    if algo == "NVLSTree" and (nodes == 1 or op != "all_reduce"):
        return False
    return not (algo == "NVLS" and nodes > 1)  # multi-node NVLS needs CollNet (SHARP switches)


def _latency_us(op: Op, algo: str, proto: str, n: int, nodes: int, f: Fabric) -> float:
    """NCCL's latency of one collective: its base plus per-hop latencies over NVLink and the
    network."""
    p = PROTOS.index(proto)
    ppn = n // nodes
    intra_lat = HW_LATENCY_US["NVLINK"][algo][p]
    inter_lat = HW_LATENCY_US["NET"]["Tree" if ppn == 1 and algo == "Ring" else algo][p]
    if algo == "NVLSTree" and f.nccl_version < (2, 28, 9):
        inter_lat = 14.0
    steps = _steps(op, n)
    base = BASE_LATENCY_US[algo][p]
    if algo == "Ring":
        n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if op == "all_reduce" else nodes - 1)
        overhead = 0.0 if nodes == 1 else NET_OVERHEAD_US * (3 if proto == "Simple" else 1)
        return base + (steps - n_inter) * max(intra_lat, overhead) + n_inter * inter_lat
    if algo == "Tree":
        return base + 2 * ((ppn - 1) * intra_lat + int(math.log2(nodes)) * inter_lat)
    if algo == "NVLS":
        return intra_lat
    return base + intra_lat + 2 * int(math.log2(nodes)) * inter_lat


def _bus_bandwidth(
    op: Op, algo: str, proto: str, nodes: int, ppn: int, graph: Graph, gen: Generation
) -> float:
    """NCCL's bus bandwidth of one collective over the graph's channels, capped per channel
    by the generation's tables."""
    col = _col(nodes)
    bw = graph.bw_intra if nodes <= 2 else graph.bw_inter
    if algo.startswith("NVLS"):
        intra_bw = graph.bw_intra * NVLS_EFFICIENCY[gen] * (graph.channels - 1) / graph.channels
        intra_bw *= 2 if op == "all_reduce" else (ppn - 1) / ppn
        inter_bw = graph.bw_inter * (2 if nodes <= 2 and algo == "NVLSTree" else 1)
        bw = min(intra_bw, inter_bw)
        if algo == "NVLSTree":
            bw = min(bw, PER_CH_MAX_NVLS_TREE[gen][col])
    bus = graph.channels * bw
    if algo == "Ring" and proto == "LL":
        bus = min(LL_MAX_BW[gen][col], bus * 0.5)
    elif algo == "Ring" and proto == "LL128":
        bus = min(bus * 0.92, graph.channels * PER_CH_MAX_RING_LL128[gen][col])
    elif algo == "Tree":
        bus = min(bus * 0.92, graph.channels * PER_CH_MAX_TREE[gen][col])
        if proto == "LL":
            bus = min(bus / 3.8, LL_MAX_BW[gen][col])
        elif proto == "LL128":
            bus = min(
                bus * (7 / 9 if nodes == 1 else 120 / 128),
                graph.channels * PER_CH_MAX_TREE_LL128[gen][col],
            )
    return bus


@cache  # a pure function of a few small values, asked for every collective of every config
def candidate(op: Op, algo: str, proto: str, n: int, nodes: int, f: Fabric) -> Choice | None:
    """NCCL's (latency, algorithm bandwidth) for one algorithm and protocol, or None."""
    ppn = n // nodes
    if not _offers(op, algo, proto, nodes):
        return None
    graph = nvls_graph(f, nodes, ppn) if algo.startswith("NVLS") else ring_graph(f, nodes, ppn)
    if graph is None:
        return None
    latency = _latency_us(op, algo, proto, n, nodes, f)
    bus = _bus_bandwidth(op, algo, proto, nodes, ppn, graph, f.generation)
    if bus <= 0:
        return None
    if algo == "Tree":
        ratio = 0.5
    elif op in ("all_gather", "reduce_scatter") and algo != "Ring":
        ratio = 1.0
    else:
        ratio = n / _steps(op, n) if op != "broadcast" else 1.0
    return Choice(algo, proto, latency, bus * ratio)


def nccl_bytes(op: Op, per_rank_bytes: T, n: int) -> T:
    """The size NCCL's model uses: the whole buffer for all-gather and reduce-scatter."""
    return per_rank_bytes * n if op in ("all_gather", "reduce_scatter") else per_rank_bytes


def collective_time(
    op: Op,
    per_rank_bytes: float,
    n: int,
    nodes: int,
    f: Fabric,
    algo: str = "default",
    proto: str = "default",
) -> tuple[float, Choice]:
    """`collective_times` of one size: seconds and the algorithm and protocol chosen."""
    if n <= 1:
        return 0.0, Choice("none", "none", 0.0, math.inf)
    t, chosen = collective_times(op, np.array([float(per_rank_bytes)]), n, nodes, f, algo, proto)
    return float(t[0]), Choice(
        chosen.algo[0], chosen.proto[0], float(chosen.latency_us[0]), float(chosen.algbw_gbps[0])
    )


@dataclass(frozen=True)
class Chosen:
    """Per size, what NCCL's model picked (`best`, an index into `offered`), with the size
    corrections applied."""

    offered: tuple[Choice, ...]
    best: np.ndarray
    latency_us: np.ndarray
    algbw_gbps: np.ndarray

    @property
    def algo(self) -> np.ndarray:
        return np.array([c.algo for c in self.offered])[self.best]

    @property
    def proto(self) -> np.ndarray:
        return np.array([c.proto for c in self.offered])[self.best]


def collective_times(
    op: Op,
    per_rank_bytes: np.ndarray,
    n: int,
    nodes: int,
    f: Fabric,
    algo: str = "default",
    proto: str = "default",
) -> tuple[np.ndarray, Chosen]:
    """Seconds for one collective of each of `per_rank_bytes` (AR: each rank's buffer; AG/RS:
    the shard) over n > 1 ranks on `nodes` nodes, with the forced or NCCL's argmin
    algo/proto.

    A forced algorithm or protocol that the collective does not offer (Tree for all-gather,
    LL for NVLS) is modelled as NCCL's own choice for that collective; an assumption about
    NCCL's fallback that commbench measurements should confirm.
    """
    nbytes = nccl_bytes(op, per_rank_bytes, n)
    offered = _choices(op, n, nodes, f, algo, proto)
    latency = np.empty((len(offered), len(nbytes)))
    algbw = np.empty_like(latency)
    for i, c in enumerate(offered):
        latency[i], algbw[i] = _size_corrections(op, c, nbytes, n, nodes, f)
    times = (latency + nbytes / (1000 * algbw)) * 1e-6
    best = np.argmin(times, axis=0)  # the first of equals, as NCCL's strict comparison
    at = np.arange(len(nbytes))
    chosen = Chosen(offered, best, latency[best, at], algbw[best, at])
    return times[best, at], chosen


@cache
def _choices(op: Op, n: int, nodes: int, f: Fabric, algo: str, proto: str) -> tuple[Choice, ...]:
    """The algorithms and protocols NCCL would weigh for this collective, the forced ones
    where it offers them."""
    if (algo, proto) != ("default", "default") and not _offered(op, n, nodes, f, algo, proto):
        algo, proto = "default", "default"
    offered = tuple(
        c
        for a in (ALGOS if algo == "default" else (algo,))
        for p in (PROTOS if proto == "default" else (proto,))
        if (c := candidate(op, a, p, n, nodes, f)) is not None
    )
    if not offered:
        raise ValueError(f"NCCL offers no {algo}/{proto} for {op} over {n} ranks")
    return offered


@cache
def _offered(op: Op, n: int, nodes: int, f: Fabric, algo: str, proto: str) -> bool:
    return any(
        candidate(op, a, p, n, nodes, f) is not None
        for a in (ALGOS if algo == "default" else (algo,))
        for p in (PROTOS if proto == "default" else (proto,))
    )


def _size_corrections(
    op: Op, c: Choice, nbytes: np.ndarray, n: int, nodes: int, f: Fabric
) -> tuple[np.ndarray, np.ndarray]:
    """(latency us, algorithm bandwidth) of a candidate at each size: Tree all-reduce's
    bandwidth by log2(size / 64) below 512 MB (and NVLSTree's below 1 GB, on Blackwell with
    x86 hosts), multi-node Simple Ring all-reduce's latency x1.4 for large enough sizes."""
    latency = np.full(len(nbytes), c.latency_us)
    algbw = np.full(len(nbytes), c.algbw_gbps)
    corrected_below = (
        23
        if c.algo == "Tree"
        else 24
        if c.algo == "NVLSTree" and f.generation == "blackwell" and f.x86_host
        else 0
    )
    if op == "all_reduce" and corrected_below:
        # floor(log2(x)) exactly: frexp gives x = m·2^e with m in [0.5, 1)
        log_size = np.frexp(np.maximum(nbytes, 64) / 64)[1] - 1
        table = np.array(TREE_CORRECTION[c.proto])
        correction = table[np.minimum(log_size, len(table) - 1)]
        algbw *= np.where(log_size < corrected_below, correction, 1.0)
    if op == "all_reduce" and c.algo == "Ring" and c.proto == "Simple" and nodes > 1:
        latency = np.where(nbytes / (8 * n) >= 64, latency * 1.4, latency)
    return latency, algbw


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' factor from algorithm to bus bandwidth (PERFORMANCE.md), for every
    collective commbench times; one rank moves nothing across a link, so 0 there."""
    if n <= 1:
        return 0.0
    return {
        "all_reduce": 2 * (n - 1) / n,
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_to_all": (n - 1) / n,
        "broadcast": 1.0,
        "send_recv": 1.0,
    }[op]


def bus_bandwidth(op: Op, per_rank_bytes: float, seconds: float, n: int) -> float:
    """nccl-tests busbw in GB/s: algbw (size/time) times the op's bus factor."""
    return nccl_bytes(op, per_rank_bytes, n) / seconds / 1e9 * bus_factor(op, n)


def clear_caches() -> None:
    """Forget every collective's cached candidates and choices: a cold start, as a benchmark
    of planning time measures it."""
    for cached in (candidate, _choices, _offered):
        cached.cache_clear()
