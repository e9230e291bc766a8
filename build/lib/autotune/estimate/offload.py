"""DeepSpeed's offload (ZeRO-Offload, Ren et al. 2021): the seconds a step spends moving
states over the host link and stepping the optimizer on the CPU."""

from __future__ import annotations

import numpy as np

from autotune.estimate.model_states import state_shards
from autotune.space.table import ConfigTable
from autotune.specs import Cluster, Workload
from autotune.specs.workload import BYTES_PER_ELEMENT

CPU_ADAM_BYTES = 30
"""Host memory an offloaded Adam step moves per parameter: fp32 master, two moments and
the fp32 gradient read (16), master and moments written (12), the 16-bit copy (2)."""


def offload_seconds(
    w: Workload, c: ConfigTable, cluster: Cluster, micro: np.ndarray, psi: np.ndarray
) -> np.ndarray:
    """Seconds a step spends on DeepSpeed's offload, per config: the rank's gradient
    partition down and updated parameters up over its host link and the CPU Adam step over
    the host's memory bandwidth (`offload_optimizer`); under `offload_param`, each parameter
    partition up for every micro-batch's forward and backward. Gradients move every
    micro-batch: ZeRO 3 copies each micro-batch's partition down, ZeRO 1-2 accumulate on the
    host through the device (`async_accumulate_grad_in_cpu_via_gpu`: up and down again after
    the first). Not overlapped."""
    device = cluster.device
    part = psi / state_shards(c)
    width = BYTES_PER_ELEMENT[w.precision]
    grad_moves = np.where(c.zero == 3, micro, np.where(micro > 1, 2 * micro - 1, 1))
    step = part * (grad_moves + 1) * width / device.host_link_bytes_per_s
    step += part * CPU_ADAM_BYTES / device.host_memory_bandwidth_bytes_per_s
    fetch = 2 * micro * part * width / device.host_link_bytes_per_s
    return np.where(c.offload_optimizer, step, 0.0) + np.where(c.offload_param, fetch, 0.0)
