"""One micro-batch's work on each kind of pipeline rank: FLOPs (of which recomputation, FP8
GEMMs, routed experts' GEMMs, linear layers' GEMMs), tensor-parallel collectives and MoE token
exchanges, from the layers the rank holds and the output layer on the last."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from autotune.estimate.activations import recomputed_layers
from autotune.estimate.stages import (
    Stages,
    head_forward_flops,
    layer_forward_flops,
    layer_linear_forward_flops,
)
from autotune.space.table import ConfigTable, NcclRuns
from autotune.specs import Workload


@dataclass(frozen=True)
class RankWork:
    """One micro-batch on a pipeline rank: forward, backward and recomputed. Per kind of
    pipeline rank (rows) and config (columns) as `of` gives it; per config for one kind."""

    flops: np.ndarray
    """All FLOPs, recomputation included."""
    recompute_flops: np.ndarray
    tp_collectives: np.ndarray
    """Tensor-parallel collectives (`StepParts.per_collective` each)."""
    fp8_flops: np.ndarray
    """Of `flops`, those in FP8 GEMMs (none without FP8); `fp8_recompute_flops`, those of
    `recompute_flops`."""
    fp8_recompute_flops: np.ndarray
    moe_exchanges: np.ndarray
    """MoE token exchanges (each a layer's forward dispatch and combine, or its backward)."""
    expert_flops: np.ndarray
    """Of `flops`, those in the routed experts' GEMMs, whose narrow side is an expert's width
    over etp, not h/tp; `expert_recompute_flops`, those of `recompute_flops`."""
    expert_recompute_flops: np.ndarray
    linear_flops: np.ndarray
    """FLOPs in linear layers' GEMMs; less the routed experts', those behind which Transformer
    Engine's tensor-parallel overlap hides the collectives."""

    @classmethod
    def of(cls, w: Workload, c: ConfigTable, stages: Stages, runs: NcclRuns) -> RankWork:
        """Each kind of rank the step's pace reads (`Stages.columns("pace")`) of the runs'
        layouts `c`, spread to the runs' configs."""
        selective = _selective_layer_flops(w, c)
        kinds = [
            _on_rank(w, c, layers, last, selective) for layers, last in stages.columns("pace")
        ]
        return cls(
            **{
                f.name: runs.spread(np.array([getattr(k, f.name) for k in kinds], dtype=float))
                for f in fields(cls)
            }
        )


def _selective_layer_flops(w: Workload, c: ConfigTable) -> tuple[np.ndarray, np.ndarray]:
    """Per layer and micro-batch, the forward FLOPs selective recomputation runs again
    (Megatron's `recompute_modules`): the attention core's scores and their product with the
    values (`core_attn`), the MLP's GEMMs (`mlp`); and of those, the ones in linear layers
    (FP8's). Activations and norms (`moe_act`, `layernorm`) cost next to no FLOPs."""
    mbs = c.mbs.astype(float)
    core = 4 * mbs * w.seq_length**2 * w.query_width
    mlp = 2 * mbs * w.seq_length * w.mean_layer_mlp_weights
    selective = c.recompute == "selective"
    core = np.where(selective & c.recomputes("core_attn"), core, 0.0)
    mlp = np.where(selective & c.recomputes("mlp"), mlp, 0.0)
    return (core + mlp) / (c.tp * c.cp), mlp / (c.tp * c.cp)


def _on_rank(
    w: Workload,
    c: ConfigTable,
    layers: np.ndarray,
    last: np.ndarray,
    selective: tuple[np.ndarray, np.ndarray],
) -> RankWork:
    """One micro-batch on a pipeline rank of `layers` (`last`: the last rank). `selective`:
    a layer's selectively recomputed FLOPs, and of those the MLP's (which FP8 runs)."""
    mbs = c.mbs.astype(float)  # FLOPs outgrow int64 on large models
    split = c.tp * c.cp
    fwd = (layers * layer_forward_flops(w, mbs) + head_forward_flops(w, mbs) * last) / split
    rebuilt = recomputed_layers(w, c, layers)
    recompute_fwd = np.where(
        c.recompute == "full", rebuilt * layer_forward_flops(w, mbs) / split, 0.0
    )
    recompute_fwd = recompute_fwd + layers * selective[0]
    # In FP8: the linear layers' GEMMs, forward, backward and recomputed.
    fp8 = w.fp8 != "none"
    linear_gemms = layer_linear_forward_flops(w, mbs) / split
    linear = linear_gemms if fp8 else 0.0
    selective_linear = layers * selective[1] if fp8 else 0.0
    # Tensor-parallel collectives of a layer's forward: attention's and the MLP's; an MoE
    # layer's routed experts take none (tokens stay sequence-sharded into the dispatcher),
    # its shared expert takes the MLP's.
    per_layer = 2 - w.moe_share * (w.moe_shared_expert_intermediate_size == 0)
    # The routed experts' share of the MLP's GEMMs: a token passes through top-k of them.
    routed = w.moe_share * w.routed_weights
    routed_share = routed / w.mean_layer_mlp_weights if w.is_moe else 0.0
    experts = 2 * mbs * w.seq_length * routed / split
    expert_recompute = rebuilt * experts + layers * selective[1] * routed_share
    return RankWork(
        flops=3 * fwd + recompute_fwd,
        recompute_flops=recompute_fwd,
        tp_collectives=2 * per_layer * layers + per_layer * rebuilt,
        fp8_flops=(3 * layers + rebuilt) * linear + selective_linear,
        fp8_recompute_flops=rebuilt * linear + selective_linear,
        moe_exchanges=w.moe_share * (2 * layers + rebuilt),
        expert_flops=3 * layers * experts + expert_recompute,
        expert_recompute_flops=expert_recompute,
        linear_flops=(3 * layers + rebuilt) * linear_gemms,
    )
