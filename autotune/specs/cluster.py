"""The machines a job runs on: devices, links between them, and the collective backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Backend = Literal["nccl", "gloo"]


@dataclass(frozen=True, kw_only=True)
class DeviceKind:
    """One accelerator (or CPU process) kind."""

    name: str
    memory_bytes: int
    peak_flops: dict[str, float] = field(hash=False)
    """Dense peak FLOP/s per precision (bf16, fp16, fp32): the denominator of MFU."""
    memory_bandwidth_bytes_per_s: float = 2.0e12
    """Device memory bandwidth: bounds the optimizer step, which reads and writes every state."""
    generation: str = "hopper"
    """NCCL's GPU generation for its cost model: ampere, hopper or blackwell (cpu for gloo
    hosts)."""
    host_memory_bytes: int = 0
    """The host memory a device's rank may fill with offloaded states: its node's RAM over its
    devices (0: none beyond the device's own, as for CPU processes, whose memory is the
    host's)."""
    host_link_bytes_per_s: float = 25e9
    """Host-to-device bandwidth of one device, each way (PCIe; Grace's NVLink-C2C)."""
    host_memory_bandwidth_bytes_per_s: float = 50e9
    """A device's share of its host's memory bandwidth: bounds an offloaded optimizer step,
    which reads and writes every state on the CPU."""
    arm_host: bool = False
    """The host CPU is Arm (GB200's Grace), not x86: NCCL's model corrects some collectives
    on x86 hosts only."""


@dataclass(frozen=True, kw_only=True)
class Link:
    """A point-to-point link as the collective model sees it: per-device bandwidth and latency."""

    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Homogeneous nodes of identical devices."""

    name: str
    nodes: int
    devices_per_node: int
    device: DeviceKind
    intra_link: Link
    inter_link: Link
    backend: Backend = "nccl"
    launcher_sections: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    """The cluster file's sections of launchers' settings, as written (`slurm:`, where SLURM
    sends the jobs), each read and checked by its launcher (`launchers.check_sections`)."""
    nvlink_domain: int | None = None
    """Devices that share one NVLink domain, a multiple of `devices_per_node` (GB200 NVL72:
    72, over 18 trays of 4); None: each node is its own domain."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def domain_size(self) -> int:
        """Devices one NVLink domain holds: groups are placed by domain, not by node."""
        return min(self.nvlink_domain or self.devices_per_node, self.world_size)
