"""The training job being tuned: a GPT-style decoder and its batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Precision = Literal["bf16", "fp16", "fp32"]

BYTES_PER_ELEMENT: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}

Fp8Recipe = Literal["none", "delayed", "tensorwise", "mxfp8"]
"""Transformer Engine's FP8 scaling recipes, as Megatron-LM's `--fp8-recipe` names them
(mxfp8: Blackwell's block-scaled format)."""


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A decoder-only transformer and its global batch, named as Megatron-LM names them."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    """Key/value heads (grouped-query attention); equal to the heads for plain multi-head."""
    ffn_hidden_size: int
    """MLP width; for SwiGLU the width of each of the two input projections."""
    vocab_size: int
    seq_length: int
    global_batch_size: int
    """Sequences per optimizer step, over all data-parallel ranks and accumulation steps."""
    precision: Precision = "bf16"
    fp8: Fp8Recipe = "none"
    """FP8 training on top of `precision`: the linear layers' GEMMs run in FP8 (Transformer
    Engine, Megatron's `--fp8-format hybrid --fp8-recipe ...`); attention's core, the output
    layer, the weights, gradients and communication stay in `precision`."""
    swiglu: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length

    @property
    def num_parameters(self) -> int:
        """Parameters of the decoder as autotune builds it (untied input and output embeddings)."""
        h, f = self.hidden_size, self.ffn_hidden_size
        kv = 2 * h * self.num_query_groups * self.head_dim
        mlp = (3 if self.swiglu else 2) * h * f
        per_layer = 2 * h * h + kv + mlp + 2 * h  # q, o, k, v, mlp, two norms
        return self.num_layers * per_layer + 2 * self.vocab_size * h + h

    def model_flops_per_step(self) -> float:
        """Model FLOPs of one optimizer step, Megatron-core's `num_floating_point_operations`.

        12·B·s·l·h²·[(1 + g/a + s/h) + (f/h)·glu + V/(2·l·h)] with glu = 3/2 for SwiGLU: forward
        plus backward (3 passes), non-causal attention scores, recomputation not counted, so
        MFU from it is comparable with Megatron's and NeMo's published figures.
        """
        b, s, layers, h = (
            self.global_batch_size,
            self.seq_length,
            self.num_layers,
            self.hidden_size,
        )
        g_over_a = self.num_query_groups / self.num_attention_heads
        glu = 1.5 if self.swiglu else 1.0
        inner = (1 + g_over_a + s / h) + (self.ffn_hidden_size / h) * glu
        inner += self.vocab_size / (2 * layers * h)
        return 12.0 * b * s * layers * h * h * inner
