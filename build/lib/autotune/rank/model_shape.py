"""The shape of the user's model, read from the module their script trains: what the
estimator needs when a DeepSpeed job is tuned without `--model`.

The hook sees the module DeepSpeed wraps and the first batch it is given: the parameter count
(ZeRO-3's partitioned parameters counted whole), the largest embedding (vocabulary and
width), whether the output layer shares its weight, and the tokens per sequence. The layers
follow from the count, as a decoder with a 4x MLP has them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.specs.workload import Precision, Workload

if TYPE_CHECKING:  # torch is imported by the worker that reads a module, not by the tuner
    import torch
    from torch import nn


@dataclass(frozen=True)
class ModelShape:
    parameters: int
    vocab_size: int
    hidden_size: int
    seq_length: int
    tied_embeddings: bool

    def workload(self, name: str, global_batch: int, precision: Precision) -> Workload:
        """A decoder of this shape: per layer 12h² + 2h parameters (attention, a 4x MLP, two
        norms), the embeddings once or twice, heads of 64 (their number changes no FLOP)."""
        h, v = self.hidden_size, self.vocab_size
        embeddings = v * h * (1 if self.tied_embeddings else 2) + h
        layers = max(1, round((self.parameters - embeddings) / (12 * h * h + 2 * h)))
        heads = max(1, h // 64)
        return Workload(
            name=name,
            num_layers=layers,
            hidden_size=h,
            num_attention_heads=heads,
            num_query_groups=heads,
            ffn_hidden_size=4 * h,
            vocab_size=v,
            seq_length=self.seq_length,
            global_batch_size=global_batch,
            precision=precision,
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_shape(module: nn.Module, tokens: torch.Tensor) -> ModelShape | None:
    """The shape of `module` given its first batch of token ids; None when it has no
    embedding (not a language model autotune can describe)."""
    from torch import nn

    embeddings = [m for m in module.modules() if isinstance(m, nn.Embedding)]
    if not embeddings:
        return None
    table = max(embeddings, key=lambda m: m.num_embeddings)
    tied = any(isinstance(m, nn.Linear) and m.weight is table.weight for m in module.modules())
    count = sum(int(getattr(p, "ds_numel", p.numel())) for p in module.parameters())
    return ModelShape(
        parameters=count,
        vocab_size=table.num_embeddings,
        hidden_size=table.embedding_dim,
        seq_length=int(tokens.shape[-1]),
        tied_embeddings=tied,
    )


def token_ids(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The token ids among a forward call's arguments: `input_ids` (Hugging Face), else the
    first integer tensor of two or more dimensions."""
    import torch

    given = kwargs.get("input_ids")
    candidates = [given, *args, *kwargs.values()]
    for value in candidates:
        if (
            torch.is_tensor(value)
            and value.dim() >= 2
            and not value.dtype.is_floating_point
            and value.dtype != torch.bool
        ):
            return value
    return None
