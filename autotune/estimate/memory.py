"""Model-state memory per rank: parameters, gradients and optimizer states.

ZeRO (Rajbhandari et al. 2020, §3.1; shared research comm_cost_model.md §5.2) with Ψ
parameters on the rank, N data-parallel ranks, P bytes per parameter, G per gradient and K
per parameter of optimizer state: stage 0 P+G+K, stage 1 P+G+K/N, stage 2 P+(G+K)/N,
stage 3 (P+G+K)/N. K is Adam's two fp32 moments (8) plus an fp32 master copy (4) where one
exists. Engine facts, measured on real tensors by the workers:

- DeepSpeed ZeRO 1-2 keep an fp32 master partition even when the model is fp32 (K = 12);
  at stage 0 and 3 in fp32 the optimizer updates the (partitioned) parameters themselves.
- FSDP2 without resharding after forward (torch zero 2) holds the unsharded parameters
  beside their shards: P + P/N + (G+K)/N.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.space import TrainConfig
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


def rank_parameters(w: Workload, tp: int, pp: int) -> int:
    """Parameters held by the most loaded rank: a pipeline stage's layers plus the input
    embedding (first stage) or final norm and output layer (last stage), split over tp.
    Norm weights are replicated across tp ranks."""
    h = w.hidden_size
    kv = w.num_query_groups * w.head_dim
    sharded = 2 * h * h + 2 * h * kv + (3 if w.swiglu else 2) * h * w.ffn_hidden_size
    per_layer = sharded // tp + 2 * h
    layers = w.num_layers // pp
    embedding = w.vocab_size * h // tp
    head = w.vocab_size * h // tp + h
    stages = [layers * per_layer + (embedding if s == 0 else 0) + (head if s == pp - 1 else 0)
              for s in range(pp)]
    return max(stages)


def model_states(w: Workload, config: TrainConfig, engine: str) -> ModelStates:
    """Bytes of parameters, gradients and optimizer states on the most loaded rank."""
    psi = rank_parameters(w, config.tp, config.pp)
    n = config.dp
    p = g = BYTES_PER_ELEMENT[w.precision]
    mixed = w.precision != "fp32"
    master = FP32_MASTER_BYTES if mixed or (engine == "deepspeed" and config.zero in (1, 2)) \
        else 0
    k = ADAM_MOMENTS_BYTES + master
    if config.zero == 0:
        return ModelStates(psi * p, psi * g, psi * k)
    if config.zero == 1:
        return ModelStates(psi * p, psi * g, psi * k / n)
    if config.zero == 2:
        params = psi * p + (psi * p / n if engine == "torch" else 0)
        return ModelStates(params, psi * g / n, psi * k / n)
    return ModelStates(psi * p / n, psi * g / n, psi * k / n)
