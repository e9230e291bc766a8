"""Context parallelism's key/value exchange: Transformer Engine's p2p ring, each step's send
hidden behind the attention block it feeds, or torch's all-gather of keys and values
repeated to the query's heads, which nothing hides (`EngineTraits.cp_gathers_kv`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.estimate import comm
from autotune.estimate.traits import EngineTraits
from autotune.space.table import ConfigTable
from autotune.specs import Cluster, Workload
from autotune.specs.workload import BYTES_PER_ELEMENT


@dataclass(frozen=True)
class ContextParallel:
    ranks: np.ndarray
    """cp: ranks that split the sequence."""
    splits: bool
    """Some config splits the sequence: the ring is counted (none otherwise)."""
    sends: tuple[comm.Timing, comm.Timing]
    """One ring step's send, forward (keys, values) and backward (and their gradients)."""
    block: np.ndarray
    """The attention FLOPs of a forward ring step, which hide its send."""
    hidden: bool
    """The ring's sends hide behind the attention blocks (Transformer Engine); else nothing
    hides them."""
    layers: np.ndarray
    """Layers on the rank with the most: each runs the ring."""

    @classmethod
    def of(
        cls,
        w: Workload,
        c: ConfigTable,
        cluster: Cluster,
        traits: EngineTraits,
        layers: np.ndarray,
    ) -> ContextParallel:
        return cls(
            ranks=c.cp,
            splits=bool((c.cp > 1).any()),
            sends=_ring_sends(w, c, cluster, traits.cp_gathers_kv),
            block=2 * c.mbs * (w.seq_length / c.cp) ** 2 * w.query_width / c.tp,
            hidden=not traits.cp_gathers_kv,
            layers=layers,
        )

    def per_micro(self, rate: np.ndarray, bandwidth_scale: float) -> np.ndarray:
        """Seconds of one micro-batch's exchange not hidden behind attention computed at
        `rate`: cp - 1 ring steps per layer, forward and backward."""
        if not self.splits:
            return np.zeros(len(self.ranks))
        cover = self.block / rate if self.hidden else 0.0
        forward = np.maximum(0.0, self.sends[0].seconds(bandwidth_scale) - cover)
        backward = np.maximum(0.0, self.sends[1].seconds(bandwidth_scale) - 2 * cover)
        ring = np.where(self.ranks == 1, 0.0, (self.ranks - 1) * (forward + backward))
        return self.layers * ring


def _ring_sends(
    w: Workload, c: ConfigTable, cluster: Cluster, gathers: bool
) -> tuple[comm.Timing, comm.Timing]:
    """One step of a layer's context-parallel ring for one micro-batch (Transformer Engine's
    p2p context parallelism): a rank passes its keys and values on (forward), and keys,
    values and their gradients (backward), each hidden behind the attention block the step
    computes; cp - 1 steps. `gathers` (torch's all-gather): the same bytes per peer, of keys
    and values repeated to the query's heads."""
    heads = w.num_attention_heads if gathers else w.num_query_groups
    kv_heads = np.maximum(1, heads // c.tp)
    kv_bytes = 2 * c.mbs * (w.seq_length // c.cp) * kv_heads * w.head_dim
    kv_bytes = kv_bytes * BYTES_PER_ELEMENT[w.precision]
    latency, bandwidth = comm.over_links(cluster, comm.place(c.cp, c.tp, cluster.domain_size))
    return (
        comm.Timing(latency, kv_bytes / bandwidth),
        comm.Timing(latency, 2 * kv_bytes / bandwidth),
    )
