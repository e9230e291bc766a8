"""Knobs that need NVIDIA's Transformer Engine where the trials run: megatron-core's own
attention has no context parallelism and its tensor-parallel overlap uses TE's userbuffers,
so without TE every trial off these values would crash."""

from __future__ import annotations

from autotune.space.spacefile import SearchSpace

NEEDS_TRANSFORMER_ENGINE = {
    "cp": (1, "its attention, which context parallelism needs"),
    "tp_comm_overlap": (False, "its userbuffers, which tp_comm_overlap needs"),
}
"""Knobs held at these values where Transformer Engine is absent: every trial off them would
crash (megatron-core's own attention has no context parallelism)."""


def without_transformer_engine(space: SearchSpace, where: str) -> SearchSpace:
    """The space with what needs Transformer Engine held off; `where` it is absent."""
    for knob, (value, needs) in NEEDS_TRANSFORMER_ENGINE.items():
        space = space.pinned(knob, value, f"{where} has no Transformer Engine: {needs}")
    return space
