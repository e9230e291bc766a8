"""Candidate layouts derived from the problem, for the knobs a space file leaves out.

Fixed lists of powers of two fail real clusters (384 GPUs = 3 x 128: every power-of-two
pipeline leaves a data-parallel size the batch cannot split) and miss layouts (pp 12 of 72
layers). So the structural knobs come from the model, the batch and the world size, each list
bounded by a named limit, and `autotune space` shows where each came from:

- tp: divisors of gcd(heads, KV heads) that divide the world and an NVLink domain's devices
  (a node's, or an NVL72 rack's 72);
- pp: divisors of the world size, up to the layers (stages may be uneven: space/pipeline.py);
- cp: divisors of the world size that leave each rank `MIN_CP_TOKENS` of the sequence, in
  the 2·cp chunks Megatron's causal load balancing cuts;
- ep: for a mixture of experts, divisors of the experts that divide the world size; etp:
  divisors of an NVLink domain's devices that divide each expert's width and the world;
  the token dispatcher stays alltoall, which every published recipe runs (a space file
  lists allgather to search it);
- hsdp: replicas of hybrid sharding, divisors of the NVLink domains (each replica shards
  within whole domains);
- vpp: up to `MAX_VPP` virtual stages per rank, each holding a layer at least;
- mbs: divisors of each data-parallel replica's share of the global batch, up to `MAX_MBS`.

A knob the space file lists keeps the file's values: a file narrows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.space.config import KNOBS
from autotune.space.spacefile import SearchSpace
from autotune.specs import Cluster, Workload

MAX_VPP = 8
"""Virtual pipeline stages per rank: published recipes go up to 8 (Llama 3.1 405B, Mixtral);
each more adds a round of pipeline sends per micro-batch."""
MIN_CP_TOKENS = 4096
"""Tokens of a sequence each context-parallel rank keeps: with fewer, its attention is too
short to hide the key/value exchange (published recipes: Llama 3 70B at 8K tokens with CP2,
at 64K with CP8; Llama 3.1 405B at 8K with CP2)."""
MAX_MBS = 8
"""Sequences per micro-batch: the published runs of these models use 1 to 4; past 8 a step's
matrices are long past efficient sizes, and every extra value multiplies the space."""


def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted({*small, *(n // d for d in small)}))


def derive_space(
    space: SearchSpace, knobs: Collection[str], workload: Workload, cluster: Cluster
) -> SearchSpace:
    """`space` with every structural knob the engine takes and the file leaves out derived
    from the workload and cluster; `origins` says where each knob's values came from."""
    values = dict(space.values)
    origins = {k: space.origins.get(k, space.source) for k in values}
    for knob, derive in _DERIVATIONS.items():
        if knob in knobs and knob not in values and (workload.is_moe or knob not in _MOE_KNOBS):
            values[knob], origins[knob] = derive(_Derivation(workload, cluster, knobs, values))
    ordered = {k: values[k] for k in KNOBS if k in values}  # the product's order: layout first
    return SearchSpace(engine=space.engine, values=ordered, source=space.source, origins=origins)


@dataclass(frozen=True)
class _Derivation:
    """What a knob's values are derived from: the problem, and the knobs' values so far."""

    workload: Workload
    cluster: Cluster
    knobs: Collection[str]
    values: Mapping[str, tuple[Any, ...]]

    @property
    def world(self) -> int:
        return self.cluster.world_size

    def chosen(self, knob: str) -> tuple[int, ...]:
        """The knob's values so far; (1,) for a knob the engine does not take."""
        return self.values.get(knob, (1,)) if knob in self.knobs else (1,)


Derived = tuple[tuple[int, ...], str]
"""A knob's candidate values and where they came from."""


def _tp(d: _Derivation) -> Derived:
    w, world, domain = d.workload, d.world, d.cluster.domain_size
    heads = math.gcd(w.num_attention_heads, w.num_query_groups)
    return tuple(x for x in divisors(heads) if domain % x == 0 and world % x == 0), (
        f"divisors of gcd(heads {w.num_attention_heads}, KV heads {w.num_query_groups}) "
        f"dividing the world size {world} and an NVLink domain's {domain} devices"
    )


def _pp(d: _Derivation) -> Derived:
    layers = d.workload.num_layers
    return tuple(x for x in divisors(d.world) if x <= layers), (
        f"divisors of the world size {d.world}, up to the {layers} layers "
        "(stages need not hold equal layers: space/pipeline.py)"
    )


def _cp(d: _Derivation) -> Derived:
    seq = d.workload.seq_length
    splits = (x for x in divisors(d.world) if x > 1 and seq % (2 * x) == 0)
    return (1,) + tuple(x for x in splits if seq // x >= MIN_CP_TOKENS), (
        f"divisors of the world size {d.world} that split the {seq}-token sequence into 2·cp "
        f"equal chunks of at least {MIN_CP_TOKENS // 2} tokens"
    )


def _ep(d: _Derivation) -> Derived:
    experts = d.workload.num_moe_experts
    return tuple(x for x in divisors(experts) if d.world % x == 0), (
        f"divisors of the {experts} experts that divide the world size {d.world}"
    )


def _etp(d: _Derivation) -> Derived:
    width, domain = d.workload.expert_ffn_size, d.cluster.domain_size
    return tuple(x for x in divisors(math.gcd(width, domain)) if d.world % x == 0), (
        f"divisors of an NVLink domain's {domain} devices that divide an "
        f"expert's width {width} and the world size {d.world}"
    )


def _hsdp(d: _Derivation) -> Derived:
    domains = d.world // d.cluster.domain_size
    return divisors(domains) if domains > 1 else (1,), (
        f"divisors of the {domains} NVLink domains: each replica shards within whole "
        "domains, the replicas all-reduce across them"
    )


def _vpp(d: _Derivation) -> Derived:
    layers = d.workload.num_layers
    stages = (range(1, min(MAX_VPP, layers // p) + 1) for p in d.chosen("pp") if p > 1)
    return _union(stages) or (1,), (
        f"up to {MAX_VPP} virtual stages per pipeline rank, each with a layer at least"
    )


def _mbs(d: _Derivation) -> Derived:
    world, batch = d.world, d.workload.global_batch_size
    tp, pp, cp = d.chosen("tp"), d.chosen("pp"), d.chosen("cp")
    ranks = (t * p * k for t in tp for p in pp for k in cp)
    replicas = {world // r for r in ranks if world % r == 0}
    shares = (batch // dp for dp in replicas if batch % dp == 0)
    return _union((m for m in divisors(share) if m <= MAX_MBS) for share in shares) or (1,), (
        f"divisors of each data-parallel replica's share of the global batch {batch}, "
        f"up to {MAX_MBS}"
    )


_DERIVATIONS: dict[str, Callable[[_Derivation], Derived]] = {
    "tp": _tp,
    "pp": _pp,
    "cp": _cp,
    "ep": _ep,
    "etp": _etp,
    "hsdp": _hsdp,
    "vpp": _vpp,
    "mbs": _mbs,
}
"""Each derived knob's derivation, in order: vpp and mbs read the layout's values."""
_MOE_KNOBS = ("ep", "etp")
"""Knobs derived only for a mixture of experts."""


def _union(groups: Iterable[Iterable[int]]) -> tuple[int, ...]:
    return tuple(sorted({v for group in groups for v in group}))
