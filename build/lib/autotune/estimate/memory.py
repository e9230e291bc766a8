"""Memory per rank, by what holds it: model states and their buffers (`model_states.py`),
activations (`activations.py`), the framework's own overhead; and whether it fits the device
and, for what is offloaded, the host."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Generic

import numpy as np

from autotune.estimate.activations import activation_bytes
from autotune.estimate.model_states import (
    Bytes,
    ModelStates,
    comm_buffer_bytes,
    fp8_weight_bytes,
    host_accumulation_bytes,
    model_states,
    most_parameters,
    offloaded_states,
)
from autotune.estimate.stages import Stages
from autotune.estimate.traits import EngineTraits
from autotune.space.table import ConfigTable
from autotune.specs import Workload
from autotune.specs.cluster import DeviceKind

FRAMEWORK_OVERHEAD_BYTES = {"cpu": 350 * 2**20, "gpu": 3 * 2**30 // 2}
"""CUDA context, NCCL and allocator slack on a GPU; interpreter, torch and engine on a CPU."""


@dataclass(frozen=True)
class MemoryBreakdown(Generic[Bytes]):
    """Bytes on the most loaded rank, by what holds them: of one config (floats), or of each
    config of a table (arrays, `row` gives one)."""

    weights: Bytes
    gradients: Bytes
    optimizer: Bytes
    activations: Bytes
    comm_buffers: Bytes
    overhead: Bytes
    offloaded: Bytes
    """In host memory, not the device's (DeepSpeed's offload): not in `total`; the host's
    own limit (`DeviceKind.host_memory_bytes`) holds it."""

    @property
    def total(self) -> Bytes:
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.comm_buffers
            + self.overhead
        )

    def as_dict(self) -> dict[str, Bytes]:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "total": self.total,
        }

    def take(self: MemoryBreakdown[np.ndarray], rows: np.ndarray) -> MemoryBreakdown[np.ndarray]:
        return MemoryBreakdown(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def row(self: MemoryBreakdown[np.ndarray], i: int) -> MemoryBreakdown[float]:
        return MemoryBreakdown(**{f.name: float(getattr(self, f.name)[i]) for f in fields(self)})


def memory_breakdown(
    w: Workload,
    c: ConfigTable,
    traits: EngineTraits,
    device_generation: str,
    stages: Stages | None = None,
) -> MemoryBreakdown[np.ndarray]:
    stages = stages or Stages.of(w, c, traits)
    held = most_parameters(w, c, stages)
    states = model_states(w, c, traits, held)
    overhead = FRAMEWORK_OVERHEAD_BYTES["cpu" if device_generation == "cpu" else "gpu"]
    on_host = offloaded_states(w, c, states, held.total)
    buffer = host_accumulation_bytes(w, c, held.total)
    own_buffer = np.zeros(len(c))
    if device_generation == "cpu":  # a CPU process's host memory is its own: nothing moves,
        on_host = ModelStates(*(np.zeros(len(c)),) * 3)  # and the buffer is in it too
        own_buffer, buffer = buffer, own_buffer
    return MemoryBreakdown(
        weights=states.params - on_host.params + fp8_weight_bytes(w, c, stages),
        gradients=states.grads - on_host.grads + own_buffer,
        optimizer=states.optimizer - on_host.optimizer,
        activations=activation_bytes(w, c, stages),
        comm_buffers=comm_buffer_bytes(w, c, traits, held.total),
        overhead=np.full(len(c), float(overhead)),
        offloaded=on_host.total + buffer,
    )


def fits(memory: MemoryBreakdown[Bytes], device: DeviceKind) -> Bytes:
    """Whether each config fits: the device's memory, and the host's for what is offloaded."""
    return (memory.total <= device.memory_bytes) & (memory.offloaded <= device.host_memory_bytes)
