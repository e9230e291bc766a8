"""Model-state memory per rank: parameters, gradients and optimizer states.

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

import math
from dataclasses import dataclass

from autotune.engines import EngineTraits, traits_of
from autotune.estimate.stages import stage_split
from autotune.space import TrainConfig
from autotune.space.pipeline import PipelineSplit
from autotune.specs import Workload
from autotune.specs.workload import BYTES_PER_ELEMENT

ADAM_MOMENTS_BYTES = 8
FP32_MASTER_BYTES = 4


@dataclass(frozen=True)
class ModelStates:
    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def layer_parameters(w: Workload, tp: int) -> int:
    """One decoder layer's parameters on a tp rank; norm weights are replicated."""
    h = w.hidden_size
    kv = w.num_query_groups * w.head_dim
    sharded = 2 * h * h + 2 * h * kv + (3 if w.swiglu else 2) * h * w.ffn_hidden_size
    return sharded // tp + 2 * h


def rank_parameters(
    w: Workload, tp: int, pp: int, rank_layers: tuple[int, ...] | None = None
) -> int:
    """Parameters held by the most loaded rank: a pipeline stage's layers (`rank_layers`, an
    even split when not given) plus the input embedding (first stage) or final norm and
    output layer (last stage), split over tp."""
    h = w.hidden_size
    per_layer = layer_parameters(w, tp)
    layers = rank_layers or (w.num_layers // pp,) * pp
    embedding = w.vocab_size * h // tp
    head = w.vocab_size * h // tp + h
    stages = [
        n * per_layer + (embedding if s == 0 else 0) + (head if s == pp - 1 else 0)
        for s, n in enumerate(layers)
    ]
    return max(stages)


def config_parameters(w: Workload, config: TrainConfig, engine: str | EngineTraits) -> int:
    """`rank_parameters` of this config, its layers placed as the engine places them."""
    split = stage_split(w, config, engine)
    return rank_parameters(w, config.tp, config.pp, split.rank_layers)


def model_states(w: Workload, config: TrainConfig, engine: str | EngineTraits) -> ModelStates:
    """Bytes of parameters, gradients and optimizer states on the most loaded rank."""
    t = traits_of(engine)
    psi = config_parameters(w, config, engine)
    n = config.dp * config.cp  # context-parallel ranks shard the optimizer with dp ones
    p = g = BYTES_PER_ELEMENT[w.precision]
    mixed = w.precision != "fp32"
    master = (
        t.fp32_master == "always"
        or mixed
        or (t.fp32_master == "mixed_or_partitioned" and config.zero in (1, 2))
    )
    k = ADAM_MOMENTS_BYTES + (FP32_MASTER_BYTES if master else 0)
    if t.fp32_main_grads:
        return ModelStates(psi * p, psi * 4, psi * k / (n if config.zero >= 1 else 1))
    if config.zero == 0:
        return ModelStates(psi * p, psi * g, psi * k)
    fp32_grads = 4 if t.fp32_grad_partition and mixed else 0
    if config.zero == 1:
        return ModelStates(psi * p, psi * g + psi * fp32_grads / n, psi * k / n)
    if config.zero == 2:
        params = psi * p + (psi * p / n if t.zero2_keeps_full_params else 0)
        return ModelStates(params, psi * (g + fp32_grads) / n, psi * k / n)
    grads = fp32_grads if fp32_grads else g
    return ModelStates(psi * p / n, psi * grads / n, psi * k / n)


FRAMEWORK_OVERHEAD_BYTES = {"cpu": 350 * 2**20, "gpu": 3 * 2**30 // 2}
"""CUDA context, NCCL and allocator slack on a GPU; interpreter, torch and engine on a CPU."""
ZERO3_PREFETCH_ELEMENTS = 50_000_000  # DeepSpeed stage3_prefetch_bucket_size default


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the most loaded rank, by what holds them."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    comm_buffers: float
    overhead: float

    @property
    def total(self) -> float:
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.comm_buffers
            + self.overhead
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "comm_buffers": self.comm_buffers,
            "overhead": self.overhead,
            "total": self.total,
        }


def layer_activation_bytes(w: Workload, config: TrainConfig) -> float:
    """Activations one layer keeps for backward, per micro-batch (Korthikanti et al. 2022,
    Table 2, in Megatron's code form `s·b·h·(18 + 4·f/h)` for a 4h MLP; SwiGLU keeps three
    f-wide tensors instead of two). Attention runs fused (flash), so the 5·a·s² score term
    is never stored; selective recomputation therefore saves nothing more here."""
    if config.recompute == "full":
        s, b, h, t = w.seq_length // config.cp, config.mbs, w.hidden_size, config.tp
        return 2 * s * b * h / (t if config.sp else 1) * BYTES_PER_ELEMENT[w.precision] / 2
    return _whole_layer_bytes(w, config)


def _whole_layer_bytes(w: Workload, config: TrainConfig) -> float:
    """A layer's activations when none is recomputed."""
    s, b, h, t = w.seq_length // config.cp, config.mbs, w.hidden_size, config.tp
    scale = BYTES_PER_ELEMENT[w.precision] / 2
    mlp = 4 * w.ffn_hidden_size / h * (1.5 if w.swiglu else 1.0)
    if config.sp:
        return s * b * h * (18 + mlp) / t * scale
    return s * b * h * (10 + (8 + mlp) / t) * scale


def recomputed_layers(w: Workload, config: TrainConfig, layers: float | None = None) -> float:
    """Layers of one pipeline stage (of `layers`, an even share when not given) whose forward
    pass runs again in backward (full recomputation): all of them (uniform), or the first
    `recompute_num_layers` of each model chunk (block)."""
    layers = w.num_layers / config.pp if layers is None else layers
    if config.recompute != "full":
        return 0.0
    if config.recompute_method == "block":
        return min(layers, config.recompute_num_layers * config.vpp)
    return layers


def stage_activation_bytes(
    w: Workload, config: TrainConfig, layers: float | None = None
) -> tuple[float, float]:
    """(kept per micro-batch in flight, rebuilt once at a time in backward) on a stage of
    `layers` (an even share when not given).

    Full recomputation keeps each recompute unit's input and rebuilds one unit when its
    backward pass comes: uniform units of `recompute_num_layers` layers, block units of one
    layer with the rest of the chunk kept whole."""
    layers = w.num_layers / config.pp if layers is None else layers
    if config.recompute != "full":
        return layers * layer_activation_bytes(w, config), 0.0
    whole = _whole_layer_bytes(w, config)
    unit_input = layer_activation_bytes(w, config)
    recomputed = recomputed_layers(w, config, layers)
    if config.recompute_method == "block":
        return recomputed * unit_input + (layers - recomputed) * whole, whole
    units = math.ceil(layers / config.vpp / config.recompute_num_layers) * config.vpp
    return units * unit_input, config.recompute_num_layers * whole


def activation_bytes(w: Workload, config: TrainConfig, split: PipelineSplit) -> float:
    """Worst stage, each with its own layers: under 1F1B rank r holds the activations of
    min(micro-batches, pp - r) micro-batches in flight (more when interleaved), the last
    rank also the fp32 logits for the loss. With even stages the first rank is the worst;
    with uneven ones (Megatron's first stage a layer short) the second may be."""
    micro = config.grad_accum(w.global_batch_size)
    pp, vpp = config.pp, config.vpp
    logits = config.mbs * w.seq_length // config.cp * w.vocab_size / config.tp * 4
    if pp == 1:
        kept, rebuilt = stage_activation_bytes(w, config, split.first_layers)
        return kept + rebuilt + logits
    interleaved = 1 + (pp - 1) / (pp * vpp)
    worst = 0.0
    first_rank: dict[int, int] = {}  # per layer count, its first rank: the most in flight
    for rank, layers in enumerate(split.rank_layers[:-1]):
        first_rank.setdefault(layers, rank)
    for layers, rank in first_rank.items():
        kept, rebuilt = stage_activation_bytes(w, config, layers)
        worst = max(worst, kept * min(micro, pp - rank) * interleaved + rebuilt)
    kept, rebuilt = stage_activation_bytes(w, config, split.last_layers)
    return max(worst, kept + rebuilt + logits)


def comm_buffer_bytes(w: Workload, config: TrainConfig, engine: str) -> float:
    """Bucket buffers the engine allocates beside the gradients."""
    width = BYTES_PER_ELEMENT[w.precision]
    t = traits_of(engine)
    if t.zero_bucket_buffers and config.dp > 1 and config.zero >= 1:
        psi = config_parameters(w, config, engine)
        if config.zero in (1, 2):
            buckets = 2 if config.overlap_comm else 1
            return (
                min(config.reduce_bucket, psi) * buckets + min(config.allgather_bucket, psi)
            ) * width
        if config.zero == 3:
            return (min(config.reduce_bucket, psi) + ZERO3_PREFETCH_ELEMENTS) * width
    if t.zero3_resident_layers and config.zero == 3:
        return t.zero3_resident_layers * layer_parameters(w, config.tp) * width
    return 0.0


def memory_breakdown(
    w: Workload, config: TrainConfig, engine: str, device_generation: str
) -> MemoryBreakdown:
    states = model_states(w, config, engine)
    overhead = FRAMEWORK_OVERHEAD_BYTES["cpu" if device_generation == "cpu" else "gpu"]
    return MemoryBreakdown(
        weights=states.params,
        gradients=states.grads,
        optimizer=states.optimizer,
        activations=activation_bytes(w, config, stage_split(w, config, engine)),
        comm_buffers=comm_buffer_bytes(w, config, engine),
        overhead=overhead,
    )
