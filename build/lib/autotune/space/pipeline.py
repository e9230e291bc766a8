"""Which layers each pipeline stage holds, when pp·vpp divides the layers and when it does not.

Layer counts that pp·vpp does not divide are common (Llama 3.1 405B: 126 layers on pp 8 x
vpp 8; BLOOM-era 70 layers on pp 12), and clusters that are not powers of two need pipeline
sizes that do not divide the layers. Each engine places them its own way:

- `uniform` (DeepSpeed's PipelineModule, autotune's torch worker): contiguous chunks, the first
  `layers % chunks` one layer longer (DeepSpeed's `partition_uniform`; with its `type:Block`
  partition the balanced split of equal blocks comes out the same);
- `megatron` (megatron-core 0.16 `TransformerConfig` and `get_num_layers_to_build`): an even
  split when pp·vpp divides the layers; else the embedding and the loss counted as one layer
  each (`--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`:
  (layers + 2) divisible by pp and its share by vpp; the first chunk and the last one layer
  short), or the first and last stages given their own counts
  (`--decoder-first-pipeline-num-layers`, `--decoder-last-pipeline-num-layers`, each a
  multiple of vpp, the middle stages sharing the rest evenly, their share a multiple of vpp),
  whichever leaves the most loaded rank fewest layers, the embedding and the loss counted as
  a layer each as Megatron's accounting does (then the fewest on the first rank, which holds
  the most activations).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import Literal

Style = Literal["uniform", "megatron"]
Placement = Literal["even", "uniform", "embedding_and_loss", "first_last"]


@dataclass(frozen=True)
class PipelineSplit:
    placement: Placement
    pp: int
    chunks: tuple[int, ...]
    """Transformer layers of each model chunk in model order; chunk v·pp + r is pipeline rank
    r's v-th virtual stage."""

    @cached_property
    def rank_layers(self) -> tuple[int, ...]:
        return tuple(sum(self.chunks[r :: self.pp]) for r in range(self.pp))

    @property
    def first_layers(self) -> int:
        """Layers on the first pipeline rank (Megatron's first-stage count)."""
        return self.rank_layers[0]

    @property
    def last_layers(self) -> int:
        return self.rank_layers[-1]

    @property
    def load(self) -> int:
        """Layers on the most loaded rank, the embedding and the loss counted as one each."""
        loads = list(self.rank_layers)
        loads[0] += 1
        loads[-1] += 1
        return max(loads)


@cache
def split_layers(layers: int, pp: int, vpp: int, style: Style) -> PipelineSplit | None:
    """How `style` places `layers` on pp ranks of vpp chunks each; None where it cannot (a
    chunk without layers, or no Megatron placement fits). Cached: a plan asks for the same
    few splits for every one of its configs."""
    n = pp * vpp
    if layers % n == 0:
        return PipelineSplit("even", pp, (layers // n,) * n)
    if style == "uniform":
        if layers < n:
            return None
        per, extra = divmod(layers, n)
        return PipelineSplit("uniform", pp, tuple(per + (k < extra) for k in range(n)))
    return _megatron(layers, pp, vpp)


def _megatron(layers: int, pp: int, vpp: int) -> PipelineSplit | None:
    if pp == 1:
        return None
    found: list[PipelineSplit] = []
    total = layers + 2
    if total % pp == 0 and (total // pp) % vpp == 0:
        chunk = total // (pp * vpp)
        accounted = [chunk] * (pp * vpp)
        accounted[0] -= 1
        accounted[-1] -= 1
        found.append(PipelineSplit("embedding_and_loss", pp, tuple(accounted)))
    middle_ranks = pp - 2
    for first in range(vpp, layers, vpp):
        for last in range(vpp, layers - first + 1, vpp):
            rest = layers - first - last
            if middle_ranks == 0:
                if rest:
                    continue
                middle = 0
            elif rest <= 0 or rest % middle_ranks or (rest // middle_ranks) % vpp:
                continue
            else:
                middle = rest // middle_ranks
            per_rank = [first] + [middle] * middle_ranks + [last]
            chunks = tuple(per_rank[r] // vpp for _ in range(vpp) for r in range(pp))
            found.append(PipelineSplit("first_last", pp, chunks))
    if not found:
        return None
    return min(found, key=lambda s: (s.load, s.first_layers))


def style_rule_reason(style: Style) -> str:
    """Why a config breaks `pipeline_places_layers`, in the engine's terms."""
    if style == "uniform":
        return "each of the pp·vpp pipeline chunks needs at least one layer"
    return (
        "Megatron places the layers evenly on pp·vpp chunks, or counting the embedding and "
        "loss as layers ((layers + 2) divisible by pp, a rank's share by vpp), or with "
        "first/last stage counts (multiples of vpp, the middle ranks' even share too)"
    )
