"""Layers on pipeline stages when pp·vpp does not divide them, each engine's way."""

import dataclasses

import pytest

from autotune.engines import get_engine
from autotune.space import TrainConfig, first_violation
from autotune.space.pipeline import split_layers
from autotune.specs import load_cluster, load_workload


def test_even_layers_split_evenly_for_every_style() -> None:
    for style in ("uniform", "megatron"):
        split = split_layers(80, 4, 5, style)  # type: ignore[arg-type]
        assert split is not None and split.placement == "even" and split.chunks == (4,) * 20


def test_uniform_gives_the_first_chunks_a_layer_more_as_deepspeed_does() -> None:
    """DeepSpeed's partition of 70 blocks on 12 stages, measured: 6 x 10, then 5, 5."""
    split = split_layers(70, 12, 1, "uniform")
    assert split is not None and split.rank_layers == (6,) * 10 + (5, 5)
    assert split_layers(4, 2, 3, "uniform") is None  # 6 chunks, 4 layers


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "placement", "ranks"),
    [
        # Llama 3.1 405B as Megatron-Bridge runs it: 126 + embedding + loss = 8 x 8 x 2
        (126, 8, 8, "embedding_and_loss", (15,) + (16,) * 6 + (15,)),
        (70, 12, 1, "embedding_and_loss", (5,) + (6,) * 10 + (5,)),
        # 80 layers on 6: no even or accounted split; the middle ranks' 14 is the least load
        (80, 6, 1, "first_last", (11, 14, 14, 14, 14, 13)),
        (80, 6, 5, "first_last", (10, 15, 15, 15, 15, 10)),  # every count a multiple of vpp
    ],
)
def test_megatron_places_uneven_layers_its_own_ways(
    layers: int, pp: int, vpp: int, placement: str, ranks: tuple[int, ...]
) -> None:
    split = split_layers(layers, pp, vpp, "megatron")
    assert split is not None and split.placement == placement and split.rank_layers == ranks
    assert sum(split.chunks) == layers and len(split.chunks) == pp * vpp


def test_megatron_refuses_what_it_cannot_place() -> None:
    assert split_layers(10, 3, 3, "megatron") is None  # every count a multiple of 3: no
    assert split_layers(10, 1, 1, "megatron") is not None  # one stage: even


def test_the_rule_says_why_in_the_engines_terms() -> None:
    rules = get_engine("megatron").rules
    w, cluster = load_workload("tiny"), load_cluster("local:8")
    broken = first_violation(TrainConfig(pp=4, vpp=2, dp=2), w, cluster, rules)
    assert broken is not None and broken.name == "pipeline_places_layers"
    assert "first/last stage counts" in broken.reason


def test_the_rank_holding_most_activations_sets_the_memory() -> None:
    """30 layers on 8 Megatron stages: 3, 4 x 6, 3. Rank 0 holds 8 micro-batches of 3 layers
    (24 layer-activations), rank 1 7 of 4 (28): rank 1 is the worst, not the first."""
    from autotune.estimate.activations import stage_activation_bytes
    from autotune.estimate.predict import estimate
    from autotune.estimate.stages import stage_split
    from autotune.space.table import ConfigTable

    w = dataclasses.replace(load_workload("llama3-8b"), num_layers=30, global_batch_size=64)
    c = TrainConfig(tp=8, pp=8, dp=1, mbs=1)
    split = stage_split(w, c.pp, c.vpp, get_engine("megatron").traits)
    assert split.rank_layers == (3, 4, 4, 4, 4, 4, 4, 3)
    per_layer, _ = stage_activation_bytes(w, ConfigTable.of([c]), 1)
    activations = estimate(
        w, c, load_cluster("dgx-h100:8"), get_engine("megatron").traits
    ).memory.activations
    assert activations == pytest.approx(per_layer * 28 * (1 + 7 / 8))


def test_megatrons_uniform_recompute_needs_chunks_its_group_divides() -> None:
    """megatron-core checkpoints layers i to i+n: a chunk of 20 takes n = 4 or 5, not 3."""
    rules = get_engine("megatron").rules
    w, cluster = load_workload("llama3-70b"), load_cluster("dgx-h100:4")
    full = TrainConfig(tp=8, pp=4, dp=1, recompute="full")
    for n, ok in ((3, False), (4, True), (5, True)):
        config = TrainConfig(**{**full.as_dict(), "recompute_num_layers": n})
        assert (first_violation(config, w, cluster, rules) is None) == ok, n
    block = TrainConfig(
        **{**full.as_dict(), "recompute_method": "block", "recompute_num_layers": 3}
    )
    assert first_violation(block, w, cluster, rules) is None
