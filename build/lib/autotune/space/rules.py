"""Validity rules: each has a name and a one-line reason, and says whether a config passes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.space.config import TrainConfig
from autotune.space.pipeline import Style, split_layers, style_rule_reason
from autotune.specs import Cluster, Workload

Check = Callable[[TrainConfig, Workload, Cluster], bool]


@dataclass(frozen=True)
class Rule:
    name: str
    reason: str
    ok: Check


def _batch_fits(c: TrainConfig, w: Workload, _: Cluster) -> bool:
    return w.global_batch_size % (c.mbs * c.dp) == 0


GENERIC_RULES: tuple[Rule, ...] = (
    Rule(
        "world_size",
        "tp·pp·cp·dp must equal the world size",
        lambda c, _, k: c.tp * c.pp * c.cp * c.dp == k.world_size,
    ),
    Rule(
        "tp_within_nvlink_domain",
        "a tensor-parallel group must fit inside one NVLink domain (a node, or an NVL72 rack)",
        lambda c, _, k: c.tp <= k.domain_size and k.domain_size % c.tp == 0,
    ),
    Rule(
        "heads_divisible_by_tp",
        "attention heads must divide evenly across tp ranks",
        lambda c, w, _: w.num_attention_heads % c.tp == 0,
    ),
    Rule(
        "query_groups_divisible_by_tp",
        "key/value heads must divide evenly across tp ranks",
        lambda c, w, _: w.num_query_groups % c.tp == 0,
    ),
    Rule(
        "expert_knobs_need_experts",
        "expert parallelism, the token dispatcher and its overlap apply to mixtures of "
        "experts only (num_moe_experts > 0)",
        lambda c, w, _: (
            w.is_moe
            or (c.ep, c.etp, c.moe_dispatcher, c.ep_comm_overlap) == (1, 1, "alltoall", False)
        ),
    ),
    Rule(
        "experts_divisible_by_ep",
        "the routed experts must divide evenly across ep ranks (Megatron: 'Number of experts "
        "should be a multiple of expert model parallel_size')",
        lambda c, w, _: not w.is_moe or w.num_moe_experts % c.ep == 0,
    ),
    Rule(
        "expert_grid_divides",
        "ep·etp must divide a pipeline stage's tp·cp·dp ranks, which Megatron lays out again "
        "as etp·ep·edp for the experts ('world_size is not divisible by "
        "expert_tensor_model_pipeline_parallel size')",
        lambda c, _w, _k: (c.tp * c.cp * c.dp) % (c.ep * c.etp) == 0,
    ),
    Rule(
        "expert_ffn_divisible_by_etp",
        "each expert's MLP width must divide evenly across etp ranks",
        lambda c, w, _: w.expert_ffn_size % c.etp == 0,
    ),
    Rule(
        "vpp_needs_pp",
        "virtual pipeline stages need pipeline parallelism (pp > 1)",
        lambda c, _w, _k: c.vpp == 1 or c.pp > 1,
    ),
    Rule(
        "batch_divisible_by_mbs_dp",
        "the global batch must divide into mbs·dp micro-batches",
        _batch_fits,
    ),
    Rule("zero_stage", "zero is a ZeRO stage, 0 to 3", lambda c, _w, _k: 0 <= c.zero <= 3),
    Rule(
        "zero_needs_dp",
        "sharding over one data-parallel rank is no sharding (zero > 0 needs dp·cp > 1: "
        "context-parallel ranks share the shards)",
        lambda c, _w, _k: c.zero == 0 or c.dp * c.cp > 1,
    ),
    Rule(
        "hsdp_splits_dp",
        "hybrid sharding needs replicas that divide dp, each with more than one shard (hsdp < dp)",
        lambda c, _w, _k: c.hsdp == 1 or (c.dp % c.hsdp == 0 and c.dp > c.hsdp),
    ),
    Rule(
        "sp_needs_tp",
        "sequence parallelism splits along the tp group (needs tp > 1)",
        lambda c, _w, _k: not c.sp or c.tp > 1,
    ),
    Rule(
        "sp_seq_divisible_by_tp",
        "sequence parallelism needs each context-parallel rank's share of the sequence "
        "divisible by tp",
        lambda c, w, _: not c.sp or (w.seq_length // c.cp) % c.tp == 0,
    ),
    Rule(
        "nccl_knobs_need_nccl",
        "NCCL algorithm and protocol apply only on the NCCL backend",
        lambda c, _, k: (
            k.backend == "nccl" or (c.nccl_algo, c.nccl_proto) == ("default", "default")
        ),
    ),
)


def pipeline_rule(style: Style) -> Rule:
    """The layers can be placed on pp·vpp chunks the engine's way (space/pipeline.py)."""
    return Rule(
        "pipeline_places_layers",
        style_rule_reason(style),
        lambda c, w, _: split_layers(w.num_layers, c.pp, c.vpp, style) is not None,
    )


def first_violation(
    config: TrainConfig, workload: Workload, cluster: Cluster, rules: Sequence[Rule]
) -> Rule | None:
    """The first rule the config breaks, or None when it is valid."""
    for rule in rules:
        if not rule.ok(config, workload, cluster):
            return rule
    return None
