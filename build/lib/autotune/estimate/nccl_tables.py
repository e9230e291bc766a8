"""NCCL's tuning tables (src/graph/tuning.cc and search.cc, v2.30 constants): its algorithms
and protocols, their base and per-hop latencies, per-channel bandwidth caps by GPU generation,
Tree all-reduce's size correction and the channel speeds its topology search tries. Source:
shared research comm_cost_model.md §1.1-1.6."""

from __future__ import annotations

from typing import Literal

from autotune.space.config import NCCL_ALGOS, NCCL_PROTOS

Generation = Literal["ampere", "hopper", "blackwell"]
GENERATIONS: tuple[Generation, ...] = ("ampere", "hopper", "blackwell")
"""The GPU generations NCCL's model is priced for here (NCCL's compCapIndex 1-3)."""
ALGOS = NCCL_ALGOS
NVLS_ARITY = 32
"""NCCL_MAX_NVLS_ARITY: NVLS channels, one a GPU, at most (device.h, search.cc)."""
PROTOS = NCCL_PROTOS
BASE_LATENCY_US = {
    "Tree": (6.8, 14.0, 8.4),
    "Ring": (6.6, 14.0, 8.4),
    "NVLS": (0, 0, 0),
    "NVLSTree": (0, 0, 0),
}
# hwLatencies per hop, (LL, LL128, Simple), by link type.
HW_LATENCY_US = {
    "NVLINK": {
        "Tree": (0.6, 1.25, 4.0),
        "Ring": (0.6, 1.9, 3.4),
        "NVLS": (0, 0, 25.0),
        "NVLSTree": (0, 0, 25.0),
    },
    "NET": {
        "Tree": (5.0, 8.5, 14.0),
        "Ring": (2.7, 4.0, 14.0),
        "NVLS": (0, 0, 18.0),
        "NVLSTree": (0, 0, 20.9),
    },
}
NET_OVERHEAD_US = 1.0  # Intel x86 hosts; x3 for Simple
# Per-channel caps by generation, columns: 1 node, 2 nodes, 4+ nodes (Blackwell: SM100's
# rows). Across nodes the LL cap is the host's (Intel x86), not the GPU's.
LL_MAX_BW = {
    "ampere": (87.7, 39.0, 20.4),
    "hopper": (141.0, 39.0, 20.4),
    "blackwell": (282.0, 39.0, 20.4),
}
PER_CH_MAX_RING_LL128 = {
    "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 36.7),
    "blackwell": (40.0, 40.0, 40.0),
}
PER_CH_MAX_TREE_LL128 = {
    "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 29.0),
    "blackwell": (55.6, 31.67, 20.0),
}
PER_CH_MAX_TREE = {
    "ampere": (24.0, 23.6, 17.8),
    "hopper": (38.7, 41.4, 36.0),
    "blackwell": (70.0, 42.8, 24.0),
}
PER_CH_MAX_NVLS_TREE = {
    "ampere": (0.0, 0.0, 0.0),
    "hopper": (0.0, 57.7, 45.5),
    "blackwell": (0.0, 96.0, 80.0),
}
NVLS_EFFICIENCY = {"ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
TREE_CORRECTION = {  # AllReduce Tree bandwidth factor by log2(bytes / 64)
    "LL": (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    "LL128": (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
        1.0,
    ),
    "Simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        0.9,
    ),
}
# The per-channel speeds NCCL's topology search tries, fastest first (search.cc).
SPEEDS_INTRA = {
    "ampere": (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3),
    "hopper": (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3),
    "blackwell": (90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18),
}
SPEEDS_INTER = {
    "ampere": (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2),
    "hopper": (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2),
    "blackwell": (96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2),
}
# Gen4 / Gen5 x16, caps the NIC path (DGX B200 and GB200 trays: ConnectX-7 on Gen5).
PCIE_BW = {"ampere": 24.0, "hopper": 48.0, "blackwell": 48.0}
