"""Activation memory per rank: what a layer keeps for its backward pass (Korthikanti et al.
2022), what recomputation rebuilds, and how many micro-batches each pipeline rank keeps in
flight."""

from __future__ import annotations

import numpy as np

from autotune.estimate.stages import Stages
from autotune.space.table import ConfigTable
from autotune.specs import Workload
from autotune.specs.workload import BYTES_PER_ELEMENT


def layer_activation_bytes(w: Workload, c: ConfigTable) -> np.ndarray:
    """Activations one layer keeps for backward, per micro-batch (Korthikanti et al. 2022,
    Table 2, in Megatron's code form `s·b·h·(18 + 4·f/h)` for a 4h MLP; SwiGLU keeps three
    f-wide tensors instead of two). Attention runs fused (flash), so the 5·a·s² score term
    is never stored; selective recomputation therefore saves nothing more here. Under full
    recomputation, only the layer's input."""
    s, b, h = w.seq_length // c.cp, c.mbs, w.hidden_size
    unit_input = 2 * s * b * h / np.where(c.sp, c.tp, 1) * BYTES_PER_ELEMENT[w.precision] / 2
    return np.where(c.recompute == "full", unit_input, _whole_layer_bytes(w, c))


def _whole_layer_bytes(w: Workload, c: ConfigTable) -> np.ndarray:
    """A layer's activations when none is recomputed, or only the modules selective
    recomputation names (`_selective_savings`)."""
    s, b, h, t = w.seq_length // c.cp, c.mbs, w.hidden_size, c.tp
    scale = BYTES_PER_ELEMENT[w.precision] / 2
    mlp = _mlp_activations(w, c)
    norms, split = _selective_savings(w, c, mlp)
    return np.where(
        c.sp,
        s * b * h * (18 + mlp - norms - split) / t * scale,
        s * b * h * (10 - norms + (8 + mlp - split) / t) * scale,
    )


LAYERNORM_UNITS = 4
"""The two norms' outputs, 2 bytes·h each per token: what recomputing `layernorm` frees."""


def _selective_savings(
    w: Workload, c: ConfigTable, mlp: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """(replicated, tensor-split) units of s·b·h 2-byte values that selective recomputation
    of Megatron's `recompute_modules` frees: `mlp` the MLP's activations (its input stays,
    counted with attention's), `moe_act` the routed experts' activation outputs (top-k of
    f_moe wide per token), `layernorm` the norms' outputs. The attention core (`core_attn`,
    the default) is flash attention's already and frees nothing."""
    selective = c.recompute == "selective"
    act = w.moe_share * w.moe_router_topk * 2 * w.expert_ffn_size / w.hidden_size
    split = np.where(c.recomputes("mlp"), mlp, np.where(c.recomputes("moe_act"), act, 0.0))
    norms = np.where(c.recomputes("layernorm"), LAYERNORM_UNITS, 0.0)
    return np.where(selective, norms, 0.0), np.where(selective, split, 0.0)


def _mlp_activations(w: Workload, c: ConfigTable) -> np.ndarray | float:
    """The average layer's MLP activations in units of s·b·h 2-byte values: `4·f/h` of a
    dense MLP (SwiGLU: x1.5). A mixture of experts keeps, for each of its top-k copies of a
    token, the expert's (its width f_moe split over etp ranks that each see etp times the
    tokens, which is no split) and the permuted input the expert read (gathered over etp),
    plus the shared expert's."""
    h, glu = w.hidden_size, 1.5 if w.swiglu else 1.0
    dense = 4 * w.ffn_hidden_size / h * glu
    if not w.is_moe:
        return dense
    routed = w.moe_router_topk * (4 * w.expert_ffn_size / h * glu + 2 * c.etp)
    shared = 4 * w.moe_shared_expert_intermediate_size / h * glu
    return w.moe_share * (routed + shared) + (1 - w.moe_share) * dense


def recomputed_layers(w: Workload, c: ConfigTable, layers: np.ndarray) -> np.ndarray:
    """Layers of a pipeline stage of `layers` whose forward pass runs again in backward
    (full recomputation): all of them (uniform), or the first `recompute_num_layers` of each
    model chunk (block)."""
    block = np.minimum(layers, c.recompute_num_layers * c.vpp)
    rebuilt = np.where(c.recompute_method == "block", block, layers)
    return np.where(c.recompute == "full", rebuilt, 0.0)


def stage_activation_bytes(
    w: Workload, c: ConfigTable, layers: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(kept per micro-batch in flight, rebuilt once at a time in backward) on a stage of
    `layers` (an even share when not given).

    Full recomputation keeps each recompute unit's input and rebuilds one unit when its
    backward pass comes: uniform units of `recompute_num_layers` layers, block units of one
    layer with the rest of the chunk kept whole."""
    layers = w.num_layers / c.pp if layers is None else layers
    return _stage_activations(w, c, layers, _whole_layer_bytes(w, c), layer_activation_bytes(w, c))


def _stage_activations(
    w: Workload, c: ConfigTable, layers: np.ndarray, whole: np.ndarray, unit_input: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`stage_activation_bytes` given a layer's activations kept whole and under full
    recomputation (`unit_input`), which every stage of a config shares."""
    recomputed = recomputed_layers(w, c, layers)
    units = np.ceil(layers / c.vpp / c.recompute_num_layers) * c.vpp
    full, block = c.recompute == "full", c.recompute_method == "block"
    kept = np.where(
        full,
        np.where(
            block, recomputed * unit_input + (layers - recomputed) * whole, units * unit_input
        ),
        layers * unit_input,
    )
    rebuilt = np.where(full, np.where(block, whole, c.recompute_num_layers * whole), 0.0)
    return kept, rebuilt


def activation_bytes(w: Workload, c: ConfigTable, stages: Stages) -> np.ndarray:
    """Worst stage, each with its own layers: under 1F1B rank r holds the activations of
    min(micro-batches, pp - r) micro-batches in flight (more when interleaved), the last
    rank also the fp32 logits for the loss. With even stages the first rank is the worst;
    with uneven ones (Megatron's first stage a layer short) the second may be. Megatron's
    expert-parallel overlap runs one more chunk's forward beside a backward, so one more
    chunk is in flight (a second micro-batch without a pipeline)."""
    micro = c.grad_accum(w.global_batch_size)
    logits = c.mbs * w.seq_length // c.cp * w.vocab_size / c.tp * 4
    interleaved = 1 + (c.pp - 1) / (c.pp * c.vpp)
    paired = np.where(c.ep_comm_overlap & (micro > 1), 1 / c.vpp, 0.0)
    worst = np.zeros(len(c))
    per_layer = _whole_layer_bytes(w, c), layer_activation_bytes(w, c)
    for layers, rank in stages.columns("flight"):
        kept, rebuilt = _stage_activations(w, c, layers, *per_layer)
        flight = np.minimum(micro, c.pp - rank) * interleaved + paired
        worst = np.maximum(worst, kept * flight + rebuilt)
    kept, rebuilt = _stage_activations(w, c, stages.last_layers, *per_layer)
    return np.maximum(worst, kept + rebuilt + logits)
