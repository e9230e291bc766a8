"""Model states per rank: parameters, gradients and optimizer states, as ZeRO shards them,
and the buffers an engine keeps beside them (communication buckets, FP8 weight copies, the
host buffers of DeepSpeed's offload).

ZeRO (Rajbhandari et al. 2020, §3.1; shared research comm_cost_model.md §5.2) with Ψ
parameters on the rank, N data-parallel ranks, P bytes per parameter, G per gradient and K
per parameter of optimizer state: stage 0 P+G+K, stage 1 P+G+K/N, stage 2 P+(G+K)/N,
stage 3 (P+G+K)/N. K is Adam's two fp32 moments (8) plus an fp32 master copy (4) where one
exists. Engine facts, measured on real tensors by the workers:

- DeepSpeed ZeRO 1-2 keep an fp32 master partition even when the model is fp32 (K = 12);
  at stage 0 and 3 in fp32 the optimizer updates the (partitioned) parameters themselves.
  In mixed precision its ZeRO optimizers also accumulate an fp32 gradient partition (4/N),
  as DeepSpeed's own estimators count it (`estimate_zero2_model_states_mem_needs`:
  2Ψ + 18Ψ/N; stage 3: 18Ψ/N plus a largest-layer buffer); the 16-bit gradients are
  reduced into it as they come, so at stage 3 only the fp32 partition stays.
- FSDP2 without resharding after forward (torch zero 2) holds the unsharded parameters
  beside their shards: P + P/N + (G+K)/N.
- Megatron keeps fp32 main gradients (G = 4) and, with the distributed optimizer (zero 1),
  shards only the optimizer: 18 or 6 + 12/N bytes per parameter in bf16, as its
  `theoretical_memory_usage.py` counts (§5.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from autotune.estimate.arrays import Values
from autotune.estimate.stages import Stages
from autotune.estimate.traits import EngineTraits
from autotune.space.table import ConfigTable
from autotune.specs import Workload
from autotune.specs.workload import BYTES_PER_ELEMENT

ADAM_MOMENTS_BYTES = 8
FP32_MASTER_BYTES = 4
Bytes = TypeVar("Bytes", float, np.ndarray)


@dataclass(frozen=True)
class ModelStates(Generic[Bytes]):
    params: Bytes
    grads: Bytes
    optimizer: Bytes

    @property
    def total(self) -> Bytes:
        return self.params + self.grads + self.optimizer


def layer_parameters(w: Workload, tp: Values) -> Values:
    """The average decoder layer's parameters on a tp rank besides its routed experts; norm
    weights and an MoE layer's router are replicated."""
    split = w.attention_weights + w.moe_share * w.shared_expert_weights
    split += (1 - w.moe_share) * w.mlp_matrices * w.hidden_size * w.ffn_hidden_size
    return split // tp + 2 * w.hidden_size + w.moe_share * w.router_weights


def layer_expert_parameters(w: Workload, experts_split: Values) -> Values:
    """The average layer's routed-expert parameters on a rank: every expert of an MoE layer
    split over ep·etp ranks (`experts_split`)."""
    return w.moe_share * w.expert_weights / experts_split


def stage_parameters(
    w: Workload,
    tp: Values,
    layers: Values,
    first: Values,
    last: Values,
    experts_split: Values,
) -> Values:
    """Parameters of a pipeline stage of `layers` on a tp rank: its layers (their experts
    split over `experts_split` ranks) plus the input embedding (`first`, a 0/1 flag) or the
    final norm and output layer (`last`)."""
    h = w.hidden_size
    embedding = w.vocab_size * h // tp
    head = w.vocab_size * h // tp + h
    per_layer = layer_parameters(w, tp) + layer_expert_parameters(w, experts_split)
    return layers * per_layer + embedding * first + head * last


def rank_parameters(w: Workload, tp: int, pp: int) -> float:
    """Parameters held by the most loaded rank when pp stages split the layers evenly, a
    mixture of experts' experts unsplit (`most_parameters` splits them)."""
    per_stage = w.num_layers // pp
    return max(stage_parameters(w, tp, per_stage, s == 0, s == pp - 1, 1) for s in range(pp))


@dataclass(frozen=True)
class HeldParameters:
    """Parameters on each config's most loaded rank, and of those the routed experts', which
    are reduced and sharded over the expert data-parallel ranks instead of the dp·cp ones."""

    total: np.ndarray
    experts: np.ndarray

    @property
    def dense(self) -> np.ndarray:
        return self.total - self.experts


def most_parameters(w: Workload, c: ConfigTable, stages: Stages) -> HeldParameters:
    """Parameters held by each config's most loaded rank, its layers placed as the engine
    places them. The rank with most parameters stands for the one with most model-state
    bytes, which for a mixture of experts may be another (dense and expert states shard
    over different groups): a near tie between pipeline stages, off by a few bytes a
    parameter on the difference."""
    split = c.ep * c.etp
    held = [
        (stage_parameters(w, c.tp, layers, first, last, split), layers)
        for layers, first, last in stages.columns("held")
    ]
    totals = np.array([total for total, _ in held], dtype=float)
    layers = np.array([layers for _, layers in held])
    most = np.argmax(totals, axis=0)
    configs = np.arange(len(c))
    experts = layers[most, configs] * layer_expert_parameters(w, split)
    return HeldParameters(totals[most, configs], np.asarray(experts, dtype=float))


def state_shards(c: ConfigTable) -> np.ndarray:
    """Ranks that shard the dense model states under ZeRO (or all-reduce them without it):
    the data-parallel ones with the context-parallel ones, which hold the same weights, over
    HSDP's replicas."""
    return c.dp * c.cp // c.hsdp


def expert_data_parallel(c: ConfigTable) -> np.ndarray:
    """Ranks holding the same experts: Megatron lays the tp·cp·dp ranks of a pipeline stage
    out again as etp·ep·edp for the experts."""
    return c.tp * c.cp * c.dp // (c.ep * c.etp)


def model_states(
    w: Workload, c: ConfigTable, traits: EngineTraits, held: HeldParameters | None = None
) -> ModelStates[np.ndarray]:
    """Bytes of parameters, gradients and optimizer states on each config's most loaded
    rank, which holds `held` (its layers placed as the engine places them when not given):
    dense ones sharded over dp·cp (context-parallel ranks shard the optimizer with dp ones),
    routed experts over the expert data-parallel ranks."""
    if held is None:
        held = most_parameters(w, c, Stages.of(w, c, traits))
    dense = _states(w, c, traits, held.dense, state_shards(c))
    if not w.is_moe:
        return dense
    experts = _states(w, c, traits, held.experts, expert_data_parallel(c))
    return ModelStates(
        dense.params + experts.params,
        dense.grads + experts.grads,
        dense.optimizer + experts.optimizer,
    )


def _states(
    w: Workload, c: ConfigTable, traits: EngineTraits, psi: np.ndarray, n: np.ndarray
) -> ModelStates[np.ndarray]:
    """ZeRO's arithmetic for `psi` parameters sharded over `n` ranks."""
    p = g = BYTES_PER_ELEMENT[w.precision]
    mixed = w.precision != "fp32"
    partitioned = (traits.fp32_master == "mixed_or_partitioned") & ((c.zero == 1) | (c.zero == 2))
    master = (traits.fp32_master == "always" or mixed) | partitioned
    k = ADAM_MOMENTS_BYTES + np.where(master, FP32_MASTER_BYTES, 0)
    if traits.fp32_main_grads:
        return ModelStates(psi * p, psi * 4, psi * k / np.where(c.zero >= 1, n, 1))
    fp32_grads = 4 if traits.fp32_grad_partition and mixed else 0
    stage = [c.zero == z for z in range(4)]
    params = np.select(
        stage,
        [
            psi * p,
            psi * p,
            psi * p + (psi * p / n if traits.zero2_keeps_full_params else 0),
            psi * p / n,
        ],
    )
    grads = np.select(
        stage,
        [
            psi * g,
            psi * g + psi * fp32_grads / n,
            psi * (g + fp32_grads) / n,
            psi * (fp32_grads if fp32_grads else g) / n,
        ],
    )
    optimizer = np.where(c.zero == 0, psi * k, psi * k / n)
    return ModelStates(params, grads, optimizer)


def offloaded_states(
    w: Workload, c: ConfigTable, states: ModelStates[np.ndarray], psi: np.ndarray
) -> ModelStates[np.ndarray]:
    """What DeepSpeed's offload moves to host memory (ZeRO-Offload, Ren et al. 2021): with
    `offload_optimizer` the optimizer states and, in mixed precision, the fp32 gradient
    partition they are updated from; with `offload_param` (ZeRO 3) the parameter partition.
    The 16-bit gradients are reduced on the device before they move."""
    fp32_partition = psi * 4 / state_shards(c)
    mixed = w.precision != "fp32"
    optimizer = np.where(c.offload_optimizer, states.optimizer, 0.0)
    grads = np.where(c.offload_optimizer & mixed, np.minimum(states.grads, fp32_partition), 0.0)
    params = np.where(c.offload_param, states.params, 0.0)  # ZeRO 3's partition
    return ModelStates(params, grads, optimizer)


def host_accumulation_bytes(w: Workload, c: ConfigTable, psi: np.ndarray) -> np.ndarray:
    """The pinned 16-bit host buffer in which ZeRO 1-2 with an offloaded optimizer accumulate
    the micro-batches' gradient partitions (none without accumulation)."""
    accumulating = (c.zero <= 2) & (c.grad_accum(w.global_batch_size) > 1)
    buffer = psi * BYTES_PER_ELEMENT[w.precision] / state_shards(c)
    return np.where(c.offload_optimizer & accumulating, buffer, 0.0)


ZERO3_PREFETCH_ELEMENTS = 50_000_000  # DeepSpeed stage3_prefetch_bucket_size default


def comm_buffer_bytes(
    w: Workload, c: ConfigTable, traits: EngineTraits, psi: np.ndarray
) -> np.ndarray:
    """Bucket buffers the engine allocates beside the gradients, with `psi` the parameters
    on each config's most loaded rank, and Transformer Engine's userbuffers under
    tp_comm_overlap."""
    width = BYTES_PER_ELEMENT[w.precision]
    out = np.zeros(len(c))
    bucketed = np.zeros(len(c), dtype=bool)
    if traits.zero_bucket_buffers:
        bucketed = (c.dp > 1) & (c.zero >= 1)
        reduce = np.minimum(c.reduce_bucket, psi)
        stage12 = reduce * np.where(c.overlap_comm, 2, 1) + np.minimum(c.allgather_bucket, psi)
        stage3 = reduce + ZERO3_PREFETCH_ELEMENTS
        out = np.where(bucketed, np.where(c.zero == 3, stage3, stage12) * width, 0.0)
    if traits.zero3_resident_layers:
        resident = traits.zero3_resident_layers * layer_parameters(w, c.tp) * width
        out = np.where(~bucketed & (c.zero == 3), resident, out)
    userbuffers = USERBUFFERS * c.mbs * (w.seq_length / c.cp) * w.hidden_size * width
    return out + np.where(c.tp_comm_overlap, userbuffers, 0.0)


USERBUFFERS = 10
"""Transformer Engine's userbuffers for --tp-comm-overlap: one buffer of a micro-batch's
(s/cp)·b x h activations for each overlapped GEMM pass (qkv, proj, fc1, fc2; forward and
gradients: initialize_ub's ten methods)."""


FP8_WEIGHT_BYTES = {"delayed": 2.0, "tensorwise": 2.0, "mxfp8": 2 * (1 + 1 / 32)}
"""Bytes per linear weight of Transformer Engine's FP8 copies, cached across a step's
micro-batches: the weight and its transpose for the backward pass (MXFP8: row- and
column-wise blocks, each with a one-byte scale per 32 values)."""


def fp8_weight_bytes(w: Workload, c: ConfigTable, stages: Stages) -> np.ndarray:
    """FP8 copies of the linear weights on the rank holding the most layers."""
    if w.fp8 == "none":
        return np.zeros(len(c))
    layers = np.max([held[0] for held in stages.columns("held")], axis=0)
    per_layer = layer_parameters(w, c.tp) - 2 * w.hidden_size
    per_layer = per_layer + layer_expert_parameters(w, c.ep * c.etp)
    return FP8_WEIGHT_BYTES[w.fp8] * layers * per_layer
