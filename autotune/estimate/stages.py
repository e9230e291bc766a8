"""Per-layer FLOPs and the pipeline placement the estimator reads: how many layers each rank
holds (space/pipeline.py, in the engine's own way), so that the rank with the most work sets
the step's pace and the ranks that hold most set the memory."""

from __future__ import annotations

from autotune.engines import EngineTraits, traits_of
from autotune.space import TrainConfig
from autotune.space.pipeline import PipelineSplit, split_layers
from autotune.specs import Workload


def layer_forward_flops(w: Workload, micro_batch: int) -> float:
    """Forward FLOPs of one layer for one micro-batch, the per-layer part of Megatron's
    formula: 2·b·s·(2h² + 2h²g/a + glu·2hf... ) written out term by term."""
    s, h, f = w.seq_length, w.hidden_size, w.ffn_hidden_size
    kv = w.num_query_groups * w.head_dim
    linear = 2 * h * h + 2 * h * kv + (3 if w.swiglu else 2) * h * f
    attention = 2 * s * h  # QK^T and AV, full (non-causal) as Megatron counts
    return 2 * micro_batch * s * (linear + attention)


def head_forward_flops(w: Workload, micro_batch: int) -> float:
    return 2 * micro_batch * w.seq_length * w.hidden_size * w.vocab_size


def stage_split(w: Workload, config: TrainConfig, engine: str | EngineTraits) -> PipelineSplit:
    """The layers of each pipeline rank as the engine places them; the validity rules have
    refused configs it cannot place."""
    style = traits_of(engine).pipeline_split
    split = split_layers(w.num_layers, config.pp, config.vpp, style)
    if split is None:
        raise ValueError(f"{config.label()}: no pipeline placement of {w.num_layers} layers")
    return split
