"""Model-state bytes by hand: ZeRO's formulas with each engine's documented facts."""

import dataclasses

import pytest

from autotune.engines import get_engine
from autotune.estimate import model_states, rank_parameters
from autotune.estimate.activations import stage_activation_bytes
from autotune.estimate.model_states import most_parameters
from autotune.estimate.stages import Stages
from autotune.estimate.traits import EngineTraits
from autotune.space import TrainConfig
from autotune.space.table import ConfigTable
from autotune.specs import load_workload

TINY = load_workload("tiny")  # 4 layers, h 64, 4 heads, 2 KV groups (kv width 32), f 256, V 512


def test_rank_parameters_by_hand() -> None:
    layer = 2 * 64 * 64 + 2 * 64 * 32 + 2 * 64 * 256 + 2 * 64  # q,o + k,v + mlp + two norms
    embedding = head = 512 * 64
    assert rank_parameters(TINY, tp=1, pp=1) == 4 * layer + embedding + head + 64
    assert TINY.num_parameters == rank_parameters(TINY, 1, 1)
    # pp=2: the last stage holds two layers, the output layer and the final norm
    assert rank_parameters(TINY, tp=1, pp=2) == 2 * layer + head + 64
    # tp=2 splits the linear layers and embeddings, not the norms
    sharded = (layer - 2 * 64) // 2 + 2 * 64
    assert rank_parameters(TINY, tp=2, pp=1) == 4 * sharded + embedding // 2 + head // 2 + 64


PSI = TINY.num_parameters  # fp32: 4 bytes each


@pytest.mark.parametrize(
    ("engine", "zero", "bytes_per_param"),
    [
        ("deepspeed", 0, 4 + 4 + 8),  # params, grads, Adam moments
        ("deepspeed", 1, 4 + 4 + 12 / 2),  # + fp32 master partition, sharded with the moments
        ("deepspeed", 2, 4 + (4 + 12) / 2),
        ("deepspeed", 3, (4 + 4 + 8) / 2),  # the fp32 partition is the master
        ("torch", 0, 4 + 4 + 8),
        ("torch", 1, 4 + 4 + 8 / 2),  # ZeroRedundancyOptimizer shards the moments
        ("torch", 2, 4 + 4 / 2 + (4 + 8) / 2),  # FSDP2 keeps unsharded params beside the shards
        ("torch", 3, (4 + 4 + 8) / 2),
    ],
)
def test_zero_stages_fp32(engine: str, zero: int, bytes_per_param: float) -> None:
    states = model_states(
        TINY, ConfigTable.of([TrainConfig(dp=2, zero=zero)]), get_engine(engine).traits
    )
    assert states.total == pytest.approx(PSI * bytes_per_param)


ZERO_PAPER = EngineTraits(
    fp32_master="mixed", bucket_unit="elements", overlap="always", script_hint="-"
)


def test_mixed_precision_matches_zero_paper_figure_1() -> None:
    """ZeRO paper: 7.5B parameters on 64 GPUs: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB, from an
    engine whose traits are the paper's plain formulas (no engine's own buffers)."""
    bf16 = dataclasses.replace(TINY, precision="bf16", global_batch_size=64)
    psi = rank_parameters(bf16, 1, 1)
    for zero, gigabytes in ((0, 120.0), (1, 31.41), (2, 16.64), (3, 1.875)):
        states = model_states(bf16, ConfigTable.of([TrainConfig(dp=64, zero=zero)]), ZERO_PAPER)
        assert states.total / psi * 7.5e9 / 1e9 == pytest.approx(gigabytes, abs=0.01)


def test_deepspeed_mixed_precision_adds_its_fp32_gradient_partition() -> None:
    bf16 = dataclasses.replace(TINY, precision="bf16", global_batch_size=64)
    psi = rank_parameters(bf16, 1, 1)
    for zero, per_param in ((1, 2 + 2 + 16 / 8), (2, 2 + 18 / 8), (3, 18 / 8)):
        states = model_states(
            bf16, ConfigTable.of([TrainConfig(dp=8, zero=zero)]), get_engine("deepspeed").traits
        )
        assert states.total == pytest.approx(psi * per_param)


def test_megatron_bytes_per_parameter_match_its_own_accounting() -> None:
    """megatron/training/theoretical_memory_usage.py: 18, or 6 + 12/dp with the
    distributed optimizer."""
    bf16 = dataclasses.replace(TINY, precision="bf16", global_batch_size=64)
    psi = rank_parameters(bf16, 1, 1)
    plain = model_states(bf16, ConfigTable.of([TrainConfig(dp=8)]), get_engine("megatron").traits)
    assert plain.total == pytest.approx(18 * psi)
    distributed = model_states(
        bf16, ConfigTable.of([TrainConfig(dp=8, zero=1)]), get_engine("megatron").traits
    )
    assert distributed.total == pytest.approx((6 + 12 / 8) * psi)


# s 8, b 1, h 4, f 16 (4h MLP), fp16 (scale 1): a layer's input is 2sbh = 64 bytes, a whole
# layer without recomputation s·b·h·(10 + 8 + 4f/h) = 32·34 = 1088 bytes.
SMALL = dataclasses.replace(
    TINY,
    hidden_size=4,
    num_attention_heads=1,
    num_query_groups=1,
    ffn_hidden_size=16,
    seq_length=8,
    precision="fp16",
)


@pytest.mark.parametrize(
    ("method", "layers", "kept", "rebuilt"),
    [
        ("uniform", 1, 4 * 64, 1088),  # every layer's input kept, one layer rebuilt
        ("uniform", 2, 2 * 64, 2 * 1088),  # one input per two layers, two rebuilt at once
        ("block", 1, 64 + 3 * 1088, 1088),  # first layer recomputed, three kept whole
        ("block", 4, 4 * 64, 1088),
    ],
)
def test_full_recomputation_methods_by_hand(
    method: str, layers: int, kept: float, rebuilt: float
) -> None:
    config = TrainConfig(
        mbs=1, recompute="full", recompute_method=method, recompute_num_layers=layers
    )  # type: ignore[arg-type]
    assert stage_activation_bytes(SMALL, ConfigTable.of([config])) == (kept, rebuilt)


def test_context_parallel_memory_by_hand() -> None:
    """Each context-parallel rank keeps its half of the sequence's activations; the
    distributed optimizer shards over dp·cp ranks (Megatron's data-parallel group with cp)."""
    assert stage_activation_bytes(SMALL, ConfigTable.of([TrainConfig(mbs=1)]), 1) == (1088, 0.0)
    assert stage_activation_bytes(SMALL, ConfigTable.of([TrainConfig(mbs=1, cp=2)]), 1) == (
        544,
        0.0,
    )  # 4 tokens
    full = TrainConfig(mbs=1, cp=2, recompute="full")  # uniform, a layer a unit
    assert stage_activation_bytes(SMALL, ConfigTable.of([full]), 4) == (4 * 32, 544)
    bf16 = dataclasses.replace(TINY, precision="bf16", global_batch_size=64)
    psi = rank_parameters(bf16, 1, 1)
    sharded = model_states(
        bf16, ConfigTable.of([TrainConfig(dp=2, cp=2, zero=1)]), get_engine("megatron").traits
    )
    assert sharded.total == pytest.approx((6 + 12 / 4) * psi)


def test_mixture_of_experts_memory_by_hand() -> None:
    """Routed experts split over ep ranks, their optimizer sharded over the expert
    data-parallel ranks (tp·cp·dp / (ep·etp)); each token keeps top-k experts' activations."""
    moe = dataclasses.replace(
        TINY, precision="bf16", num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=128
    )
    experts_per_layer = 4 * 2 * 64 * 128 // 2  # 4 experts of two 64x128 matrices, over ep 2
    dense_per_layer = 12288 + 64 * 4 + 2 * 64  # q, k, v, o; the router; two norms
    embedding_and_head = 2 * 512 * 64 + 64
    config = TrainConfig(dp=4, ep=2, zero=1)
    held = most_parameters(
        moe,
        ConfigTable.of([config]),
        Stages.of(moe, ConfigTable.of([config]), get_engine("megatron").traits),
    )
    assert held.total[0] == 4 * (dense_per_layer + experts_per_layer) + embedding_and_head
    assert held.experts[0] == 4 * experts_per_layer
    states = model_states(moe, ConfigTable.of([config]), get_engine("megatron").traits)
    dense = 4 * dense_per_layer + embedding_and_head
    # bf16 weights and fp32 gradients (6 bytes) everywhere; Adam's 12 over dp 4 or edp 2.
    assert states.total[0] == pytest.approx(
        dense * (6 + 12 / 4) + 4 * experts_per_layer * (6 + 12 / 2)
    )
    # s·b·h·(10 + 8 + mlp) with mlp = k·(4·f_moe/h + 2): 2·(8 + 2) = 20, where dense has 16.
    kept, _ = stage_activation_bytes(moe, ConfigTable.of([TrainConfig(mbs=1, ep=2)]), 1)
    assert kept[0] == 64 * 64 * (10 + 8 + 20)


def test_selective_recomputation_by_module_by_hand() -> None:
    """Megatron's recompute_modules: the MLP's activations (4·f/h = 16 units of s·b·h here)
    or the norms' outputs (4) are rebuilt, not kept; the attention core is flash's already."""
    bf16 = dataclasses.replace(TINY, precision="bf16")  # s 64, b 1, h 64: 4,096 per unit

    def kept(**knobs: object) -> float:
        table = ConfigTable.of([TrainConfig(mbs=1, **knobs)])  # type: ignore[arg-type]
        return float(stage_activation_bytes(bf16, table, 1)[0][0])

    assert kept() == kept(recompute="selective") == 4096 * (10 + 8 + 16)
    assert kept(recompute="selective", recompute_modules="core_attn+mlp") == 4096 * (10 + 8)
    assert kept(recompute="selective", recompute_modules="layernorm") == 4096 * (6 + 8 + 16)


def test_a_table_mixing_module_lists_keeps_what_each_config_alone_keeps() -> None:
    bf16 = dataclasses.replace(TINY, precision="bf16")
    configs = [
        TrainConfig(mbs=1, recompute="selective", recompute_modules=modules)
        for modules in ("core_attn", "core_attn+mlp", "layernorm", "mlp+layernorm", "core_attn")
    ]
    together = stage_activation_bytes(bf16, ConfigTable.of(configs), 1)[0]
    alone = [stage_activation_bytes(bf16, ConfigTable.of([c]), 1)[0][0] for c in configs]
    assert list(together) == alone
    assert alone[3] == 4096 * (6 + 8)  # neither the MLP's nor the norms' activations kept
