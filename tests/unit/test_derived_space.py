"""Candidate layouts come from the model, the batch and the cluster, so clusters that are not
powers of two plan (the issue on plans at scale: 384 A100s found no valid config)."""

from pathlib import Path

import pytest

from autotune.calibration.saved import load_calibration
from autotune.estimate.ranking import memory_verdicts
from autotune.problem import load_problem
from autotune.space.derive import divisors

DATA = Path(__file__).resolve().parents[1] / "data" / "models"


def test_divisors() -> None:
    assert divisors(72) == (1, 2, 3, 4, 6, 8, 9, 12, 18, 24, 36, 72)
    assert divisors(1) == (1,)


def test_bloom_on_384_a100s_plans_bigscience_layout_among_the_best(tmp_path: Path) -> None:
    """72 layers, global batch 2048 on 48 DGX-A100 nodes: every power-of-two pipeline left
    a factor 3 in dp; derived, pp 3, 6, 12, 24 are there, and TP4 PP12 DP8 (BigScience's
    layout) is among the five best predicted layouts."""
    space = tmp_path / "narrow.yaml"  # the layout knobs stay derived; the rest fixed: fast
    space.write_text(
        "engine: megatron\nknobs:\n  zero: [1]\n  sp: [true]\n  overlap_comm: [true]\n"
        "  overlap_param_gather: [true]\n  recompute: [none, full]\n"
    )
    problem = load_problem("megatron", str(DATA / "bloom-72l.yaml"), "dgx-a100:48", str(space))
    assert problem.space.values["pp"] == (1, 2, 3, 4, 6, 8, 12, 24)
    assert "layers" in problem.space.origins["pp"]
    cal, _ = load_calibration(tmp_path, problem.cluster)  # none saved: the default
    ranked, _ = memory_verdicts(problem, problem.enumerate().require_some().valid, cal)
    layouts = list(dict.fromkeys((e.config.tp, e.config.pp, e.config.dp) for e in ranked))
    assert (4, 12, 8) in layouts[:5]


@pytest.mark.parametrize(
    ("engine", "model", "cluster"),
    [
        ("megatron", "gpt3-175b", "dgx-h100:96"),
        ("megatron", "gpt3-175b", "dgx-a100:48"),
        ("torch", "gpt3-175b", "dgx-a100:12"),
        ("deepspeed", "gpt-1.3b", "dgx-a100:6"),
    ],
)
def test_clusters_that_are_not_powers_of_two_find_valid_configs(
    engine: str, model: str, cluster: str
) -> None:
    """The factor 3 goes where the model and batch allow it: pp (96 or 24 layers) or dp (a
    batch of 1536). (llama3-70b's 80 layers and batch of 128 leave it nowhere on 384 GPUs
    until uneven pipeline stages are searched.)"""
    found = load_problem(engine, model, cluster).enumerate().require_some()
    assert any(c.pp % 3 == 0 for c in found.valid)


def test_100_nodes_plan_when_the_batch_splits_over_them(tmp_path: Path) -> None:
    """800 GPUs = 2^5 x 5^2: a batch of 1600 splits into 100 replicas of tp 8."""
    model = tmp_path / "gpt3.yaml"
    model.write_text(
        "name: gpt3-175b-b1600\nnum_layers: 96\nhidden_size: 12288\nnum_attention_heads: 96\n"
        "ffn_hidden_size: 49152\nvocab_size: 51200\nseq_length: 2048\nglobal_batch_size: 1600\n"
    )
    found = load_problem("megatron", str(model), "dgx-h100:100").enumerate().require_some()
    assert {(c.tp, c.dp) for c in found.valid} >= {(8, 100)}


def test_a_space_file_narrows_a_derived_knob(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("engine: torch\nknobs:\n  tp: [2]\n")
    problem = load_problem("torch", "llama3-8b", "dgx-h100:2", str(space))
    assert problem.space.values["tp"] == (2,)
    assert problem.space.origins["tp"] == str(space)
    assert problem.space.values["pp"] == (1, 2, 4, 8, 16)  # derived: divides 16 and 32
