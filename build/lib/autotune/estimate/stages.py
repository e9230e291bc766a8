"""Per-layer FLOPs and the pipeline placement the estimator reads: how many layers each rank
holds (space/pipeline.py, in the engine's own way), so that the rank with the most work sets
the step's pace and the ranks that hold most set the memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from autotune.estimate.arrays import Values, grouped
from autotune.estimate.traits import EngineTraits
from autotune.space.pipeline import PipelineSplit, split_layers
from autotune.space.table import ConfigTable
from autotune.specs import Workload


def layer_forward_flops(w: Workload, micro_batch: Values) -> Values:
    """Forward FLOPs of the average layer for one micro-batch, the per-layer part of
    Megatron's formula: 2·b·s·(the linear weights a token passes through + 2·s·a·d for the
    attention scores and their product with the values)."""
    s = w.seq_length
    attention = 2 * s * w.query_width  # QK^T and AV, non-causal as Megatron counts
    return 2 * micro_batch * s * (layer_linear_weights(w) + attention)


def layer_linear_forward_flops(w: Workload, micro_batch: Values) -> Values:
    """The part of `layer_forward_flops` in the linear layers' GEMMs (what FP8 runs)."""
    return 2 * micro_batch * w.seq_length * layer_linear_weights(w)


def layer_linear_weights(w: Workload) -> float:
    """Weights of the average layer's linear layers that a token passes through (q, k, v, o
    and the MLP: a mixture of experts' router, shared expert and top-k experts), unsharded."""
    return w.attention_weights + w.mean_layer_mlp_weights


def head_forward_flops(w: Workload, micro_batch: Values) -> Values:
    return 2 * micro_batch * w.seq_length * w.hidden_size * w.vocab_size


def stage_split(
    w: Workload, pp: int, vpp: int, traits: EngineTraits, label: str = ""
) -> PipelineSplit:
    """The layers of each pipeline rank as the engine places them; the validity rules have
    refused configs it cannot place."""
    split = split_layers(w.num_layers, pp, vpp, traits.pipeline_split)
    if split is None:
        raise ValueError(
            f"{label or f'pp={pp},vpp={vpp}'}: no pipeline placement of {w.num_layers} layers"
        )
    return split


@dataclass(frozen=True)
class Stages:
    """Per config (a row), the pipeline ranks the model reads, from its placement. The
    two-dimensional arrays list a few ranks per config, distinct in what the model asks of
    them, padded by repeating the first."""

    last_layers: np.ndarray
    busiest: np.ndarray
    """Layers on the rank with the most."""
    pace_layers: np.ndarray
    pace_last: np.ndarray
    """(layers, whether it is the last rank, which also computes the output layer) of each
    kind of rank: the slowest sets the step's pace."""
    held_layers: np.ndarray
    held_first: np.ndarray
    held_last: np.ndarray
    """(layers, first rank, last rank) of each kind: the one holding most parameters."""
    flight_layers: np.ndarray
    flight_rank: np.ndarray
    """(layers, its first rank) of each layer count on ranks but the last: under 1F1B the
    earlier a rank, the more micro-batches it keeps in flight."""

    @classmethod
    def of(cls, w: Workload, c: ConfigTable, traits: EngineTraits) -> Stages:
        """Each distinct (pp, vpp) placed once, its ranks spread to the configs that have it."""
        group = np.zeros(len(c), dtype=np.int64)
        splits: list[tuple[int, PipelineSplit]] = []
        for (pp, vpp), rows in grouped(c.pp, c.vpp):
            group[rows] = len(splits)
            splits.append((pp, stage_split(w, pp, vpp, traits, c.config(rows[0]).label())))
        per_split: dict[str, list[list[tuple[int, ...]]]] = {"pace": [], "held": [], "flight": []}
        for pp, split in splits:
            ranks = split.rank_layers
            per_split["pace"].append(sorted({(n, r == pp - 1) for r, n in enumerate(ranks)}))
            per_split["held"].append(
                sorted({(n, r == 0, r == pp - 1) for r, n in enumerate(ranks)})
            )
            flight: dict[int, int] = {}
            for r, layers in enumerate(ranks[:-1]):
                flight.setdefault(layers, r)
            per_split["flight"].append(sorted(flight.items()) or [(split.last_layers, 0)])

        def spread(kind: str, field: int, dtype: type) -> np.ndarray:
            width = max((len(entries) for entries in per_split[kind]), default=1)
            rows = [[e[field] for e in entries] for entries in per_split[kind]]
            padded = [r + r[:1] * (width - len(r)) for r in rows]
            return np.array(padded, dtype=dtype).reshape(len(splits), width)[group]

        def each(value: Callable[[PipelineSplit], int]) -> np.ndarray:
            return np.array([value(split) for _, split in splits], dtype=np.int64)[group]

        return cls(
            last_layers=each(lambda split: split.last_layers),
            busiest=each(lambda split: max(split.rank_layers)),
            pace_layers=spread("pace", 0, np.int64),
            pace_last=spread("pace", 1, np.bool_),
            held_layers=spread("held", 0, np.int64),
            held_first=spread("held", 1, np.bool_),
            held_last=spread("held", 2, np.bool_),
            flight_layers=spread("flight", 0, np.int64),
            flight_rank=spread("flight", 1, np.int64),
        )

    def take(self, rows: np.ndarray) -> Stages:
        return Stages(**{name: a[rows] for name, a in vars(self).items()})

    def columns(self, kind: str) -> Iterator[tuple[np.ndarray, ...]]:
        """The ranks of one kind (pace, held, flight), one column of rows at a time."""
        arrays = [a for name, a in vars(self).items() if name.startswith(kind)]
        for k in range(arrays[0].shape[1]):
            yield tuple(a[:, k] for a in arrays)
