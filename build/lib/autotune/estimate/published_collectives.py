"""Published NCCL all-reduce measurements the collective model is checked against.

From shared research comm_cost_model.md §4 (row numbers as there). Each row: a system, the
ranks and nodes, the message size, what was measured, and whether NCCL's default choice
was measured (algo "default") or a forced algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.estimate.collectives import Fabric

H100 = Fabric(generation="hopper", nvlink_gbps=370.8, nic_gbps=50.0)
H100_NCCL_2_21 = Fabric(
    generation="hopper", nvlink_gbps=370.8, nic_gbps=50.0, nccl_version=(2, 21, 5)
)
A100 = Fabric(generation="ampere", nvlink_gbps=240.0, nic_gbps=25.0)


@dataclass(frozen=True)
class Measured:
    row: str
    system: str
    fabric: Fabric
    ranks: int
    nodes: int
    size_bytes: int
    algo: str
    busbw_gbps: float | None = None
    latency_us: float | None = None
    note: str = ""


GiB = 2**30
PLATEAUS = [
    Measured("1", "8xH100 NVLS", H100, 8, 1, 4 * GiB, "default", busbw_gbps=480),
    Measured("2", "8xH100 ring", H100, 8, 1, 4 * GiB, "Ring", busbw_gbps=370),
    Measured("4", "8xH100 NVLS", H100, 8, 1, 4 * GiB, "default", busbw_gbps=476),
    Measured("5", "8xH200", H100, 8, 1, 4 * GiB, "default", busbw_gbps=475),
    Measured("6a", "2xH100 ring", H100, 2, 1, 4 * GiB, "Ring", busbw_gbps=365),
    Measured("6b", "7xH100 NVLS", H100, 7, 1, 4 * GiB, "NVLS", busbw_gbps=460),
    Measured("6c", "6xH100 NVLS", H100, 6, 1, 4 * GiB, "NVLS", busbw_gbps=440),
    Measured("6d", "5xH100 NVLS", H100, 5, 1, 4 * GiB, "NVLS", busbw_gbps=420),
    Measured("8", "2x8 H100 NDR", H100, 16, 2, 4 * GiB, "default", busbw_gbps=470),
    Measured("9", "4x8 H100 NDR", H100, 32, 4, 16 * GiB, "default", busbw_gbps=365.84),
    Measured("12", "multi-node DGX-A100 HDR", A100, 128, 16, 4 * GiB, "Ring", busbw_gbps=192),
    Measured("13", "8xA100", A100, 8, 1, 4 * GiB, "default", busbw_gbps=232.54),
]
LATENCIES = [
    Measured(
        "19",
        "8xH20 (NVLink4) 4 B",
        H100,
        8,
        1,
        4,
        "default",
        latency_us=12.49,
        note="below NCCL's own model floor (Ring/LL 15.0 us)",
    ),
    Measured("19", "8xH20 (NVLink4) 1 KiB", H100, 8, 1, 1024, "default", latency_us=16.38),
    Measured("19", "8xH20 (NVLink4) 4 KiB", H100, 8, 1, 4096, "default", latency_us=16.69),
    Measured(
        "20",
        "2x8 H20 NVLSTree 512 B, NCCL 2.21.5",
        H100_NCCL_2_21,
        16,
        2,
        512,
        "NVLSTree",
        latency_us=47.76,
        note="with 2.21's constants (NET hop 14 us)",
    ),
    Measured(
        "21",
        "3x8 H100 Tree/LL 64 B (NCCL's own estimate)",
        H100,
        24,
        3,
        64,
        "Tree",
        latency_us=25.207382,
    ),
]
