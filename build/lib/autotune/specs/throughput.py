"""What a step time means for a workload on a cluster: the one place tokens/s, TFLOP/s per
device and MFU are computed, for predictions, measured trials and replayed sweeps alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from autotune.specs.cluster import Cluster
from autotune.specs.workload import Workload

Rate = TypeVar("Rate", float, np.ndarray)


@dataclass(frozen=True)
class Throughput(Generic[Rate]):
    """Of one step time, or of an array of them."""

    tokens_per_s: Rate
    tflops_per_device: Rate
    """Model FLOPs (megatron-core's count, recomputation not included) per second per device."""
    mfu: Rate | None
    """Against the device's peak at the workload's precision; None when the peak is unknown."""


def throughput(workload: Workload, cluster: Cluster, step_time_s: Rate) -> Throughput[Rate]:
    flops = workload.model_flops_per_step() / step_time_s / cluster.world_size
    peak = cluster.device.peak_flops.get(workload.precision)
    return Throughput(
        tokens_per_s=workload.tokens_per_step / step_time_s,
        tflops_per_device=flops / 1e12,
        mfu=flops / peak if peak else None,
    )
