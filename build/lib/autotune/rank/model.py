"""The workload's decoder in plain PyTorch, shared by every engine's worker.

Module names follow one plan (`attn.q`, `mlp.up`, ...) so that tensor-parallel plans and
pipeline splits can address them. Imports torch: only workers load this module.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from autotune.space.pipeline import split_layers
from autotune.specs import Workload


class Attention(nn.Module):
    def __init__(self, w: Workload, selective_recompute: bool) -> None:
        super().__init__()
        h, kv = w.hidden_size, w.num_query_groups * w.head_dim
        query = w.query_width
        self.head_dim = w.head_dim
        self.selective_recompute = selective_recompute
        self.repeat_kv = False
        """Key and value heads repeated up to the query's inside the attention core, as
        torchtitan does under context parallelism: its ring passes the repeated heads."""
        self.q = nn.Linear(h, query, bias=False)
        self.k = nn.Linear(h, kv, bias=False)
        self.v = nn.Linear(h, kv, bias=False)
        self.o = nn.Linear(query, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]
        # -1 heads: under tensor parallelism each rank holds its share of heads.
        q, k, v = (
            proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q, self.k, self.v)
        )
        if self.selective_recompute:
            # Korthikanti et al.'s selective recomputation: keep the cheap-to-recompute,
            # memory-heavy attention core out of the saved activations.
            out = checkpoint(_core_attention, q, k, v, self.repeat_kv, use_reentrant=False)
        else:
            out = _core_attention(q, k, v, self.repeat_kv)
        return self.o(out.transpose(1, 2).reshape(b, s, -1))


def _core_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, repeat_kv: bool
) -> torch.Tensor:
    if repeat_kv and k.shape[1] != q.shape[1]:
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class MLP(nn.Module):
    """The dense MLP, `width` wide (the workload's FFN width unless given: an expert's)."""

    def __init__(self, w: Workload, width: int | None = None) -> None:
        super().__init__()
        h, f = w.hidden_size, width or w.ffn_hidden_size
        self.up = nn.Linear(h, f, bias=False)
        self.gate = nn.Linear(h, f, bias=False) if w.swiglu else None
        self.down = nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


MlpOf = Callable[[int], nn.Module]
"""The MLP of the decoder layer with this index: an engine's mixture-of-experts layer where
the workload has one, else the dense `MLP`."""


class Block(nn.Module):
    """Pre-norm decoder layer; `recompute` is none, selective (attention core) or full."""

    def __init__(self, w: Workload, recompute: str, mlp: nn.Module | None = None) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(w.hidden_size)
        self.attn = Attention(w, selective_recompute=recompute == "selective")
        self.mlp_norm = nn.RMSNorm(w.hidden_size)
        self.mlp = mlp if mlp is not None else MLP(w)
        self.full_recompute = recompute == "full"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.full_recompute and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Embedding(nn.Module):
    def __init__(self, w: Workload) -> None:
        super().__init__()
        self.tok = nn.Embedding(w.vocab_size, w.hidden_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok(tokens)


class Head(nn.Module):
    """Final norm and output projection (untied from the input embedding)."""

    def __init__(self, w: Workload) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(w.hidden_size)
        self.out = nn.Linear(w.hidden_size, w.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class Decoder(nn.Module):
    """Embedding, blocks, head; a pipeline stage keeps only its slice (others are None)."""

    def __init__(
        self,
        w: Workload,
        recompute: str,
        layers: range | None = None,
        first: bool = True,
        last: bool = True,
        mlp_of: MlpOf | None = None,
    ) -> None:
        super().__init__()
        layers = range(w.num_layers) if layers is None else layers
        self.embed = Embedding(w) if first else None
        # Keyed by global layer index so checkpoints and TP plans name layers the same everywhere.
        self.blocks = nn.ModuleDict(
            {str(i): Block(w, recompute, mlp_of(i) if mlp_of else None) for i in layers}
        )
        self.head = Head(w) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks.values():
            x = block(x)
        if self.head is not None:
            x = self.head(x)
        return x


def stage_layers(num_layers: int, pp: int, vpp: int, stage: int) -> range:
    """Contiguous layers of one pipeline stage (chunk `stage` in model order), placed as
    `space.pipeline` says for the uniform style: the first stages a layer longer where
    pp·vpp does not divide the layers."""
    split = split_layers(num_layers, pp, vpp, "uniform")
    assert split is not None, "the pipeline_places_layers rule refuses such configs"
    start = sum(split.chunks[:stage])
    return range(start, start + split.chunks[stage])


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def synthetic_batch(w: Workload, micro_batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and next-token labels: no data files, same on every data-parallel rank."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, w.vocab_size, (micro_batch, w.seq_length + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
