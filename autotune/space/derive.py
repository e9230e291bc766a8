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
from collections.abc import Collection, Iterable

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
    world, values = cluster.world_size, dict(space.values)
    origins = {k: space.origins.get(k, space.source) for k in values}
    tp = values.get("tp", (1,)) if "tp" in knobs else (1,)
    if "tp" in knobs and "tp" not in values:
        heads = math.gcd(workload.num_attention_heads, workload.num_query_groups)
        tp = values["tp"] = tuple(
            d for d in divisors(heads) if cluster.domain_size % d == 0 and world % d == 0
        )
        origins["tp"] = (
            f"divisors of gcd(heads {workload.num_attention_heads}, KV heads "
            f"{workload.num_query_groups}) dividing the world size {world} and an NVLink "
            f"domain's {cluster.domain_size} devices"
        )
    pp = values.get("pp", (1,)) if "pp" in knobs else (1,)
    if "pp" in knobs and "pp" not in values:
        pp = values["pp"] = tuple(d for d in divisors(world) if d <= workload.num_layers)
        origins["pp"] = (
            f"divisors of the world size {world}, up to the {workload.num_layers} layers "
            "(stages need not hold equal layers: space/pipeline.py)"
        )
    cp = values.get("cp", (1,)) if "cp" in knobs else (1,)
    if "cp" in knobs and "cp" not in values:
        seq = workload.seq_length
        cp = values["cp"] = (1,) + tuple(
            d
            for d in divisors(world)
            if d > 1 and seq % (2 * d) == 0 and seq // d >= MIN_CP_TOKENS
        )
        origins["cp"] = (
            f"divisors of the world size {world} that split the {seq}-token sequence into 2·cp "
            f"equal chunks of at least {MIN_CP_TOKENS // 2} tokens"
        )
    if workload.is_moe and "ep" in knobs and "ep" not in values:
        experts = workload.num_moe_experts
        values["ep"] = tuple(d for d in divisors(experts) if world % d == 0)
        origins["ep"] = f"divisors of the {experts} experts that divide the world size {world}"
    if workload.is_moe and "etp" in knobs and "etp" not in values:
        width = workload.expert_ffn_size
        values["etp"] = tuple(
            d for d in divisors(math.gcd(width, cluster.domain_size)) if world % d == 0
        )
        origins["etp"] = (
            f"divisors of an NVLink domain's {cluster.domain_size} devices that divide an "
            f"expert's width {width} and the world size {world}"
        )
    if "hsdp" in knobs and "hsdp" not in values:
        domains = world // cluster.domain_size
        values["hsdp"] = divisors(domains) if domains > 1 else (1,)
        origins["hsdp"] = (
            f"divisors of the {domains} NVLink domains: each replica shards within whole "
            "domains, the replicas all-reduce across them"
        )
    if "vpp" in knobs and "vpp" not in values:
        values["vpp"] = _union(
            range(1, min(MAX_VPP, workload.num_layers // p) + 1) for p in pp if p > 1
        ) or (1,)
        origins["vpp"] = (
            f"up to {MAX_VPP} virtual stages per pipeline rank, each with a layer at least"
        )
    if "mbs" in knobs and "mbs" not in values:
        replicas = {
            world // (t * p * k) for t in tp for p in pp for k in cp if world % (t * p * k) == 0
        }
        batch = workload.global_batch_size
        values["mbs"] = _union(
            (m for m in divisors(batch // dp) if m <= MAX_MBS)
            for dp in replicas
            if batch % dp == 0
        ) or (1,)
        origins["mbs"] = (
            f"divisors of each data-parallel replica's share of the global batch {batch}, "
            f"up to {MAX_MBS}"
        )
    ordered = {k: values[k] for k in KNOBS if k in values}  # the product's order: layout first
    return SearchSpace(engine=space.engine, values=ordered, source=space.source, origins=origins)


def _union(groups: Iterable[Iterable[int]]) -> tuple[int, ...]:
    return tuple(sorted({v for group in groups for v in group}))
