"""Every validity rule: one config that breaks it and a neighbour that passes."""

import dataclasses

import pytest

from autotune.engines import ENGINES, get_engine
from autotune.engines.megatron.exports import transformer_config_kwargs
from autotune.space import GENERIC_RULES, TrainConfig, first_violation
from autotune.specs import load_cluster, load_workload

TINY = load_workload("tiny")  # 4 layers, 4 heads, 2 KV groups, seq 64, global batch 16
LOCAL2 = load_cluster("local:2")
LOCAL8 = load_cluster("local:8")
H100 = load_cluster("dgx-h100:2")
LLAMA70 = load_workload("llama3-70b")  # 80 layers, global batch 128
H100x4 = load_cluster("dgx-h100:4")  # 32 GPUs
MIXTRAL = load_workload("mixtral-8x7b")  # 8 experts of width 14336, 32 layers
QWEN3 = load_workload("qwen3-30b-a3b")  # 128 experts of width 768, 48 layers, batch 512

# rule name -> (engine, workload, cluster, breaking config, passing config)
CASES = {
    "world_size": (
        "torch",
        TINY,
        LOCAL2,
        TrainConfig(tp=2, dp=2, zero=2),
        TrainConfig(tp=2, dp=1),
    ),
    "tp_within_nvlink_domain": (
        "torch",
        dataclasses.replace(TINY, num_attention_heads=32, num_query_groups=16, hidden_size=512),
        H100,
        TrainConfig(tp=16, dp=1),
        TrainConfig(tp=8, dp=2, zero=2),
    ),
    "heads_divisible_by_tp": (
        "torch",
        dataclasses.replace(TINY, num_attention_heads=2, num_query_groups=2, hidden_size=64),
        LOCAL8,
        TrainConfig(tp=4, dp=2, zero=2),
        TrainConfig(tp=2, dp=4, zero=2),
    ),
    "query_groups_divisible_by_tp": (
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(tp=4, dp=2, zero=2),
        TrainConfig(tp=2, dp=4, zero=2),
    ),
    "vpp_needs_pp": (
        "torch",
        TINY,
        LOCAL2,
        TrainConfig(vpp=2, dp=2),
        TrainConfig(pp=2, vpp=2, dp=1),
    ),
    "pipeline_places_layers": (  # a chunk without layers; Megatron's ways: test_pipeline.py
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(pp=8, dp=1),
        TrainConfig(pp=4, dp=2),
    ),
    "batch_divisible_by_mbs_dp": (
        "deepspeed",
        TINY,
        LOCAL2,
        TrainConfig(dp=2, mbs=16),
        TrainConfig(dp=2, mbs=8),
    ),
    "zero_stage": (
        "deepspeed",
        TINY,
        LOCAL2,
        TrainConfig(dp=2, zero=4),
        TrainConfig(dp=2, zero=3),
    ),
    "zero_needs_dp": (
        "deepspeed",
        TINY,
        LOCAL2,
        TrainConfig(pp=2, dp=1, zero=1),
        TrainConfig(dp=2, zero=1),
    ),
    "sp_needs_tp": (
        "torch",
        TINY,
        LOCAL2,
        TrainConfig(dp=2, sp=True),
        TrainConfig(tp=2, dp=1, sp=True),
    ),
    "sp_seq_divisible_by_tp": (
        "torch",
        dataclasses.replace(TINY, seq_length=63),
        LOCAL2,
        TrainConfig(tp=2, dp=1, sp=True),
        TrainConfig(tp=2, dp=1),
    ),
    "nccl_knobs_need_nccl": (
        "deepspeed",
        TINY,
        LOCAL2,
        TrainConfig(dp=2, nccl_algo="Ring"),
        TrainConfig(dp=2),
    ),
    "deepspeed_no_tp": ("deepspeed", TINY, LOCAL2, TrainConfig(tp=2, dp=1), TrainConfig(dp=2)),
    "deepspeed_no_vpp": (
        "deepspeed",
        TINY,
        LOCAL2,
        TrainConfig(pp=2, vpp=2, dp=1),
        TrainConfig(pp=2, dp=1),
    ),
    "deepspeed_pipeline_zero": (
        "deepspeed",
        TINY,
        LOCAL8,
        TrainConfig(pp=2, dp=4, zero=2),
        TrainConfig(pp=2, dp=4, zero=1),
    ),
    "deepspeed_overlap_needs_zero": (
        "deepspeed",
        TINY,
        LOCAL2,
        TrainConfig(dp=2, overlap_comm=True),
        TrainConfig(dp=2, zero=1, overlap_comm=True),
    ),
    "deepspeed_allgather_bucket_zero12": (
        "deepspeed",
        TINY,
        LOCAL2,
        TrainConfig(dp=2, zero=3, allgather_bucket=10**6),
        TrainConfig(dp=2, zero=2, allgather_bucket=10**6),
    ),
    "torch_zero1_plain_ddp": (
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(pp=2, dp=4, zero=1),
        TrainConfig(dp=8, zero=1, mbs=2),
    ),
    "torch_tp_dp_fsdp": (
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(tp=2, dp=4, zero=0),
        TrainConfig(tp=2, dp=4, zero=3),
    ),
    "torch_no_tp_with_pp": (
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(tp=2, pp=2, dp=2, zero=2),
        TrainConfig(pp=2, dp=4, zero=2),
    ),
    "torch_pipeline_microbatches": (
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(pp=4, dp=2, mbs=4),
        TrainConfig(pp=4, dp=2, mbs=2),
    ),
    "torch_ddp_bucket_needs_ddp": (
        "torch",
        TINY,
        LOCAL2,
        TrainConfig(dp=2, zero=3, ddp_bucket_mb=50),
        TrainConfig(dp=2, zero=0, ddp_bucket_mb=50),
    ),
    "torch_cp_needs_cuda": (
        "torch",
        TINY,
        LOCAL2,
        TrainConfig(cp=2, dp=1, zero=2),
        TrainConfig(dp=2, zero=2),
    ),
    "torch_cp_splits_the_sequence": (
        "torch",
        dataclasses.replace(LLAMA70, seq_length=8194),
        H100,
        TrainConfig(cp=2, dp=8, zero=3),
        TrainConfig(dp=16, zero=3),
    ),
    "torch_cp_beside_fsdp_alone": (
        "torch",
        LLAMA70,
        H100,
        TrainConfig(tp=8, cp=2, dp=1, zero=3),
        TrainConfig(cp=2, dp=8, zero=3),
    ),
    "megatron_zero_is_distributed_optimizer": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, dp=4, zero=2),
        TrainConfig(tp=8, dp=4, zero=1),
    ),
    "megatron_interleaving_microbatches": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, pp=4, vpp=2, dp=1, mbs=64),  # 2 micro-batches for 4 stages
        TrainConfig(tp=8, pp=4, vpp=2, dp=1, mbs=32),
    ),
    "megatron_param_gather_needs_distopt": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, dp=4, overlap_comm=True, overlap_param_gather=True),
        TrainConfig(tp=8, dp=4, zero=1, overlap_comm=True, overlap_param_gather=True),
    ),
    "megatron_tp_comm_overlap_needs_sp": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, dp=4, tp_comm_overlap=True),
        TrainConfig(tp=8, dp=4, sp=True, tp_comm_overlap=True),
    ),
    "megatron_cp_splits_the_sequence": (
        "megatron",
        dataclasses.replace(LLAMA70, seq_length=8196),  # 8196 = 4 x 2049
        H100x4,
        TrainConfig(tp=8, cp=4, dp=1),
        TrainConfig(tp=8, cp=2, dp=2),
    ),
    "deepspeed_offload_optimizer_needs_zero": (
        "deepspeed",
        TINY,
        LOCAL8,
        TrainConfig(dp=8, offload_optimizer=True),
        TrainConfig(dp=8, zero=1, offload_optimizer=True),
    ),
    "deepspeed_offload_param_needs_zero3": (
        "deepspeed",
        TINY,
        LOCAL8,
        TrainConfig(dp=8, zero=2, offload_optimizer=True, offload_param=True),
        TrainConfig(dp=8, zero=3, offload_optimizer=True, offload_param=True),
    ),
    "deepspeed_moe_zero12": (
        "deepspeed",
        MIXTRAL,
        LOCAL8,
        TrainConfig(dp=8, ep=8, zero=3),
        TrainConfig(dp=8, ep=8, zero=2),
    ),
    "deepspeed_moe_without_pipeline": (
        "deepspeed",
        MIXTRAL,
        LOCAL8,
        TrainConfig(pp=2, dp=4, ep=4, zero=1),
        TrainConfig(dp=8, ep=4, zero=1),
    ),
    "hsdp_splits_dp": (
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(dp=8, zero=2, hsdp=8),
        TrainConfig(dp=8, zero=2, hsdp=2),
    ),
    "torch_hsdp_needs_fsdp": (
        "torch",
        TINY,
        LOCAL8,
        TrainConfig(dp=8, hsdp=2),
        TrainConfig(dp=8, zero=3, hsdp=2),
    ),
    "megatron_ep_comm_overlap_needs_ep_alltoall": (
        "megatron",
        QWEN3,
        H100,
        TrainConfig(dp=16, ep=1, ep_comm_overlap=True),
        TrainConfig(dp=16, ep=16, ep_comm_overlap=True),
    ),
    "megatron_ep_comm_overlap_needs_vpp": (
        "megatron",
        QWEN3,
        H100,
        TrainConfig(pp=2, dp=8, ep=8, ep_comm_overlap=True),
        TrainConfig(pp=2, vpp=2, dp=8, ep=8, ep_comm_overlap=True),
    ),
    "megatron_ep_comm_overlap_without_full_recompute": (
        "megatron",
        QWEN3,
        H100,
        TrainConfig(dp=16, ep=16, recompute="full", ep_comm_overlap=True),
        TrainConfig(dp=16, ep=16, recompute="selective", ep_comm_overlap=True),
    ),
    "megatron_ep_comm_overlap_needs_half_precision": (
        "megatron",
        dataclasses.replace(QWEN3, precision="fp32"),
        H100,
        TrainConfig(dp=16, ep=16, ep_comm_overlap=True),
        TrainConfig(dp=16, ep=16),
    ),
    "expert_knobs_need_experts": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, dp=4, ep=2, sp=True),
        TrainConfig(tp=8, dp=4, sp=True),
    ),
    "experts_divisible_by_ep": (
        "megatron",
        MIXTRAL,
        H100,
        TrainConfig(dp=16, ep=16),
        TrainConfig(dp=16, ep=8),
    ),
    "expert_grid_divides": (  # a stage of 4 ranks cannot hold 8 expert-parallel ones
        "megatron",
        MIXTRAL,
        H100,
        TrainConfig(pp=4, dp=4, ep=8),
        TrainConfig(pp=4, dp=4, ep=4),
    ),
    "expert_ffn_divisible_by_etp": (
        "megatron",
        dataclasses.replace(MIXTRAL, moe_ffn_hidden_size=1000),
        H100,
        TrainConfig(dp=16, etp=16),
        TrainConfig(dp=16, etp=8),
    ),
    "megatron_moe_tp_needs_sp": (
        "megatron",
        MIXTRAL,
        H100,
        TrainConfig(tp=2, dp=8, ep=2),
        TrainConfig(tp=2, dp=8, ep=2, sp=True),
    ),
    "megatron_recompute_modules_need_selective": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, dp=4, recompute_modules="core_attn+mlp"),
        TrainConfig(tp=8, dp=4, recompute="selective", recompute_modules="core_attn+mlp"),
    ),
    "megatron_moe_act_needs_grouped_gemm": (
        "megatron",
        dataclasses.replace(MIXTRAL, precision="fp16"),
        H100,
        TrainConfig(dp=16, ep=8, recompute="selective", recompute_modules="moe_act"),
        TrainConfig(dp=16, ep=8, recompute="selective", recompute_modules="core_attn"),
    ),
    "megatron_overlap_needs_dp": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, pp=4, dp=1, overlap_comm=True),
        TrainConfig(tp=8, pp=2, cp=2, dp=1, overlap_comm=True),  # cp ranks reduce gradients
    ),
    "megatron_bucket_needs_overlap": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, dp=4, ddp_bucket_mb=160),
        TrainConfig(tp=8, dp=4, overlap_comm=True, ddp_bucket_mb=160),
    ),
    "megatron_recompute_options_need_full": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, dp=4, recompute_num_layers=2),
        TrainConfig(tp=8, dp=4, recompute="full", recompute_num_layers=2),
    ),
    "megatron_recompute_layers_fit": (
        "megatron",
        LLAMA70,
        H100x4,
        TrainConfig(tp=8, pp=4, dp=1, recompute="full", recompute_num_layers=40),
        TrainConfig(tp=8, pp=4, dp=1, recompute="full", recompute_num_layers=20),
    ),
}


def all_rules() -> set[str]:
    """Every rule of every registered engine: a new engine's rules need cases here."""
    names = {r.name for r in GENERIC_RULES}
    for engine in ENGINES.values():
        names |= {r.name for r in engine.rules}
    return names


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == all_rules()


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_rejects_breaking_config_and_passes_neighbour(name: str) -> None:
    engine, workload, cluster, broken, fine = CASES[name]
    rules = get_engine(engine).rules
    violation = first_violation(broken, workload, cluster, rules)
    assert violation is not None and violation.name == name
    assert first_violation(fine, workload, cluster, rules) is None


def test_megatron_interleaves_two_stages_as_megatron_lm_does() -> None:
    """Megatron-LM overlaps pipeline p2p by default, so its interleaved schedule needs only
    pp > 1: Megatron-Bridge's Qwen3-30B-A3B recipe on 16 H100s runs PP2 VPP12. The exported
    TransformerConfig keeps that overlap, which megatron-core leaves off by default."""
    recipe = TrainConfig(pp=2, vpp=12, dp=8, ep=8, mbs=1)
    qwen = dataclasses.replace(load_workload("qwen3-30b-a3b"), global_batch_size=1024)
    cluster = load_cluster("dgx-h100:2")
    assert first_violation(recipe, qwen, cluster, get_engine("megatron").rules) is None
    kwargs = transformer_config_kwargs(qwen, recipe)
    assert kwargs["overlap_p2p_comm"] is True and kwargs["batch_p2p_comm"] is False
    plain = dataclasses.replace(recipe, vpp=1)
    assert "overlap_p2p_comm" not in transformer_config_kwargs(qwen, plain)


def test_the_experts_overlap_needs_the_alltoall_dispatcher() -> None:
    """megatron-core overlaps the alltoall (or flex) dispatcher's exchanges only: the
    allgather dispatcher with the overlap breaks the same rule as no expert parallelism."""
    gathered = TrainConfig(dp=16, ep=16, moe_dispatcher="allgather", ep_comm_overlap=True)
    broken = first_violation(gathered, QWEN3, H100, get_engine("megatron").rules)
    assert broken is not None and broken.name == "megatron_ep_comm_overlap_needs_ep_alltoall"
