"""The `local` cluster: this host's CUDA devices with NCCL, else its cores as gloo processes."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

from autotune.specs.cluster import Cluster, DeviceKind, Link
from autotune.specs.presets import DEVICES

# Shared-memory transport between processes on one host: a first guess, calibrated later.
HOST_LINK = Link(bandwidth_bytes_per_s=5e9, latency_s=20e-6)
# NVLink4 as NCCL models it; a first guess for an unknown multi-GPU host.
DEVICES_LINK = Link(bandwidth_bytes_per_s=370.8e9, latency_s=1e-6)


def detect_local_cluster() -> Cluster:
    """CUDA devices if nvidia-smi lists any, otherwise one gloo process per usable core."""
    gpus = _nvidia_gpus()
    if gpus:
        name, memory_mib = gpus[0]
        device = _known_device(name) or DeviceKind(
            name=name, memory_bytes=memory_mib * 2**20, peak_flops=DEVICES["h100-sxm"].peak_flops
        )
        # This host's RAM over its GPUs, not a datasheet's: what offloaded states may fill.
        device = dataclasses.replace(device, host_memory_bytes=_total_memory_bytes() // len(gpus))
        return Cluster(
            name="local",
            nodes=1,
            devices_per_node=len(gpus),
            device=device,
            intra_link=DEVICES_LINK,
            inter_link=DEVICES_LINK,
            backend="nccl",
        )
    cores = len(os.sched_getaffinity(0))
    return Cluster(
        name="local",
        nodes=1,
        devices_per_node=cores,
        device=cpu_device(cores),
        intra_link=HOST_LINK,
        inter_link=HOST_LINK,
        backend="gloo",
    )


def cpu_device(processes: int) -> DeviceKind:
    """One CPU core as a device: nominal peak from clock and vector width, memory shared out."""
    memory = _total_memory_bytes() // max(processes, 1)
    peak = _core_peak_flops()
    return DeviceKind(
        name="cpu-core",
        memory_bytes=memory,
        peak_flops={"fp32": peak, "bf16": peak, "fp16": peak},
        memory_bandwidth_bytes_per_s=10e9,
        generation="cpu",
        # Offloading to the host is a copy within the same memory.
        host_link_bytes_per_s=10e9,
        host_memory_bandwidth_bytes_per_s=10e9,
    )


def _core_peak_flops() -> float:
    """fp32 FLOP/s of one core: GHz x FMA lanes x 2 FMA units x 2 FLOPs (AVX-512: 16 lanes)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)]
    ghz = (max(mhz) / 1000) if mhz else 2.0
    lanes = 16 if "avx512f" in text else 8 if "avx2" in text else 4
    return ghz * 1e9 * lanes * 2 * 2


def _total_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _nvidia_gpus() -> list[tuple[str, int]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [line.rsplit(",", 1) for line in out.strip().splitlines() if "," in line]
    return [(name.strip(), int(float(mem))) for name, mem in rows]


def _known_device(nvidia_name: str) -> DeviceKind | None:
    lowered = nvidia_name.lower()
    for key, marker in (("h200", "h200"), ("h100-sxm", "h100"), ("a100-80gb", "a100")):
        if marker in lowered:
            return DEVICES[key]
    return None
