"""The pipeline's cost beside its stages' work: the 1F1B bubble, (p-1)/v micro-batches of a
stage's work each rank idles for, and the activations' point-to-point transfers between
stages."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.estimate import comm
from autotune.space.table import ConfigTable
from autotune.specs import Cluster


@dataclass(frozen=True)
class Pipeline:
    bubble_share: np.ndarray
    """(p-1)/v: micro-batches of a stage's work each rank idles for."""
    p2p: comm.Timing
    """A step's activation sends and receives between stages, forward and backward."""

    @classmethod
    def of(
        cls, c: ConfigTable, cluster: Cluster, micro: np.ndarray, activation: np.ndarray
    ) -> Pipeline:
        """`activation`: bytes of one micro-batch's activations between layers (b·s/cp·h)."""
        pp_group = comm.place(c.pp, c.tp * c.cp * c.dp, cluster.domain_size)
        latency, bandwidth = comm.over_links(cluster, pp_group)
        p2p_bytes = activation / np.where(c.tp > 1, c.tp, 1)
        transfers = np.where(c.pp == 1, 0.0, 2 * micro * c.vpp)
        return cls(
            bubble_share=(c.pp - 1) / c.vpp,
            p2p=comm.Timing(transfers * latency, transfers * (p2p_bytes / bandwidth)),
        )

    def bubble(self, per_micro_stage: np.ndarray) -> np.ndarray:
        """Seconds the bubble idles a rank, given one micro-batch of its stage's whole work."""
        return self.bubble_share * per_micro_stage
