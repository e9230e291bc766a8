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
    kv_channels: int = 0
    """Width of each attention head (Megatron's `--kv-channels`); 0: hidden / heads. Qwen3
    models, among others, use wider heads than that."""
    num_moe_experts: int = 0
    """Routed experts of a mixture-of-experts MLP (Megatron's `--num-experts`); 0: dense."""
    moe_router_topk: int = 2
    """Experts each token is routed to."""
    moe_ffn_hidden_size: int = 0
    """Each expert's MLP width; 0: `ffn_hidden_size`."""
    moe_shared_expert_intermediate_size: int = 0
    """Width of the shared expert every token also passes through; 0: none."""
    moe_layer_freq: int = 1
    """Every k-th layer is a mixture of experts, starting with the first (Megatron's integer
    `--moe-layer-freq`); the others keep the dense MLP."""

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.num_moe_experts > 0

    @property
    def expert_ffn_size(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return -(-self.num_layers // self.moe_layer_freq) if self.is_moe else 0

    @property
    def moe_share(self) -> float:
        """Share of the layers that are mixtures of experts: the model treats every layer as
        the average one, exact for models that are all MoE or all dense."""
        return self.moe_layers / self.num_layers

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP: two, or three with SwiGLU's gate."""
        return 3 if self.swiglu else 2

    @property
    def query_width(self) -> int:
        """Width of the queries over all heads (heads x kv_channels): what attention's
        projections and scores scale with, the hidden size only where the heads split it."""
        return self.num_attention_heads * self.head_dim

    @property
    def attention_weights(self) -> int:
        """Weights of one layer's q, k, v and output projections."""
        query = self.query_width
        kv = self.num_query_groups * self.head_dim
        return 2 * self.hidden_size * query + 2 * self.hidden_size * kv

    @property
    def expert_weights(self) -> int:
        """Weights of every routed expert of one MoE layer: what expert parallelism shards."""
        return self.num_moe_experts * self.mlp_matrices * self.hidden_size * self.expert_ffn_size

    @property
    def router_weights(self) -> int:
        """An MoE layer's router, replicated on every tensor-parallel rank."""
        return self.hidden_size * self.num_moe_experts

    @property
    def shared_expert_weights(self) -> int:
        """An MoE layer's shared expert, split over tensor-parallel ranks like a dense MLP."""
        return self.mlp_matrices * self.hidden_size * self.moe_shared_expert_intermediate_size

    @property
    def routed_weights(self) -> int:
        """Weights of the top-k routed experts a token passes through in an MoE layer."""
        return self.moe_router_topk * self.mlp_matrices * self.hidden_size * self.expert_ffn_size

    @property
    def mean_layer_mlp_weights(self) -> float:
        """MLP weights a token passes through in the average layer: the dense MLP, or the
        router, the shared expert and top-k experts."""
        dense = self.mlp_matrices * self.hidden_size * self.ffn_hidden_size
        moe = self.router_weights + self.shared_expert_weights + self.routed_weights
        return self.moe_share * moe + (1 - self.moe_share) * dense

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length

    @property
    def num_parameters(self) -> int:
        """Parameters of the decoder as autotune builds it (untied input and output embeddings)."""
        h = self.hidden_size
        dense_mlp = self.mlp_matrices * h * self.ffn_hidden_size
        moe_mlp = self.expert_weights + self.router_weights + self.shared_expert_weights
        mlps = self.moe_layers * moe_mlp + (self.num_layers - self.moe_layers) * dense_mlp
        per_layer = self.attention_weights + 2 * h  # q, k, v, o, two norms
        return self.num_layers * per_layer + mlps + 2 * self.vocab_size * h + h

    def model_flops_per_step(self) -> float:
        """Model FLOPs of one optimizer step, Megatron-core's `num_floating_point_operations`.

        12·B·s·l·h²·[(1 + g/a + s/h)·q/h + (f/h)·glu + V/(2·l·h)] with glu = 3/2 for SwiGLU
        and q = heads·kv_channels: forward plus backward (3 passes), non-causal attention
        scores, recomputation not counted, so MFU from it is comparable with Megatron's and
        NeMo's published figures. MoE layers count top-k experts and the shared expert
        (`(f_moe·k + f_shared)/h·glu`), the router not, as Megatron does.
        """
        b, s, layers, h = (
            self.global_batch_size,
            self.seq_length,
            self.num_layers,
            self.hidden_size,
        )
        g_over_a = self.num_query_groups / self.num_attention_heads
        query_ratio = self.query_width / h
        glu = 1.5 if self.swiglu else 1.0
        routed = self.moe_router_topk * self.expert_ffn_size
        moe_mlp = (routed + self.moe_shared_expert_intermediate_size) / h * glu
        dense_mlp = self.ffn_hidden_size / h * glu
        mlp = self.moe_share * moe_mlp + (1 - self.moe_share) * dense_mlp
        inner = (1 + g_over_a + s / h) * query_ratio + mlp
        inner += self.vocab_size / (2 * layers * h)
        return 12.0 * b * s * layers * h * h * inner
